/**
 * The escape suite as an unprivileged user (user-namespace mode). Not a *.test.js file: escape.test.ts runs it as
 * a system user it creates, and reports its output. argv[2] is the phase:
 *   suite      every attack; memory and process limits as this host provides them to the user
 *   limits     root has delegated cgroups to the user: the limits must hold
 *   reported   a cgroup group exists but was not handed to the user: sandboxes start, limits reported as not enforced
 * MINISANDBOX_HOME is a fresh directory the user owns; MSB_ESCAPE_DELEGATED says whether root delegated cgroups.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { cgroupSupport } from "../../src/sandbox/limits.js";
import { mountsUnder, scratchDirs } from "../helpers.js";
import { leftoverProcesses, registerEscapeSuite, registerLimitTests, registerOutsideProcessesTest } from "./attacks.js";

const phase = process.argv[2];
const home = process.env.MINISANDBOX_HOME;
const uid = process.getuid!();
if (!home || uid === 0) throw new Error("run as an unprivileged user, with MINISANDBOX_HOME set");
const delegated = process.env.MSB_ESCAPE_DELEGATED === "1";
const target = { mode: "userns" as const, home, hostUid: uid, idCount: 1, limitsEnforced: delegated };

test(`cgroup support is detected as ${delegated ? "delegated" : "not delegated"}`, () => {
  const { memory, pids } = cgroupSupport();
  assert.deepEqual({ memory, pids }, { memory: delegated, pids: delegated });
});

if (phase === "suite") registerEscapeSuite(target);
else if (phase === "limits" || phase === "reported")
  describe(`memory and process limits (${phase})`, () => {
    after(() => {
      assert.deepEqual(leftoverProcesses(home), []);
      assert.deepEqual(mountsUnder(home), []);
      assert.deepEqual(scratchDirs(home), []);
    });
    registerLimitTests(target);
    if (phase === "limits") registerOutsideProcessesTest(home);
  });
else throw new Error(`unknown phase ${phase}`);
