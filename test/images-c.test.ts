/**
 * The C project's image (src/fixtures/images.ts: the Debian root with tcc and make, the project built at /testbed)
 * run by `minisandbox exec --image` and by `podman run` of the same image (runc, no default ulimits, as
 * scripts/bench-setup.sh sets podman up: `fixturePodmanEnv`) gives the same exit status, stdout and stderr: the
 * image's own test command (its Cmd, `make check`), which passes, and the same command after a change that breaks the
 * library, which make rebuilds with tcc before the tests fail. The language of the image does not matter.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import { join } from "node:path";
import { getImage, importImage } from "../src/env/images/index.js";
import { openStore } from "../src/env/store/index.js";
import { fixtureImages, fixturePodmanEnv } from "../src/fixtures/images.js";
import { homeLayout } from "../src/util/home.js";
import { CLI, tempDir } from "./helpers.js";

const dir = tempDir("msb-img-c-");
const home = join(dir, "home");
const set = await fixtureImages({ instances: 2, c: true, log: (m) => process.stderr.write(`# ${m}\n`) });
const cImage = set.images.find((i) => i.kind === "c-instance")!;
const store = openStore(homeLayout(home).store);
const ref = (await importImage(store, set.layout, { name: cImage.name })).refs[0]!;

/** What a run shows its caller: exit status and both streams. */
function outcome(r: SpawnSyncReturns<string>): { status: number | null; stdout: string; stderr: string } {
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** `argv` in a sandbox on the image, through the command line. */
function inSandbox(argv: string[]): SpawnSyncReturns<string> {
  return spawnSync(process.execPath, [CLI, "--home", home, "exec", "--image", ref, "--", ...argv], {
    encoding: "utf8",
  });
}

/** `argv` (none: the image's Cmd) in `podman run` of the same image, from the fixtures' podman storage. */
function inPodman(argv: string[]): SpawnSyncReturns<string> {
  return spawnSync("podman", ["run", "--rm", "--network", "none", `localhost/${cImage.name}`, ...argv], {
    encoding: "utf8",
    env: { ...process.env, ...fixturePodmanEnv() },
  });
}

test("the image's own test command (its Cmd, make check) passes, the same in a sandbox and in podman", async () => {
  const cmd = (await getImage(store, ref)).config.Cmd;
  assert.deepEqual(cmd, ["make", "CC=tcc", "check"], "the fixture's test command");
  const podman = inPodman([]);
  assert.deepEqual(
    [podman.status, podman.stdout],
    [0, "./test_gcd\nPASS gcd_basic\nPASS gcd_negative\n"],
    podman.stderr,
  );
  assert.deepEqual(outcome(inSandbox(cmd!)), outcome(podman));
});

test("after a change that breaks gcd, make rebuilds it with tcc and the tests fail, the same in both", () => {
  // gcd(a, b) + 1: both tests fail, test_gcd exits 1, make says so on stderr and exits 2.
  const broken = [
    "sh",
    "-c",
    "sed -i 's/return a < 0 ? -a : a;/return (a < 0 ? -a : a) + 1;/' gcd.c && make CC=tcc check",
  ];
  const podman = inPodman(broken);
  assert.equal(podman.status, 2, podman.stderr);
  assert.equal(podman.stdout, "tcc -o test_gcd gcd.c test_gcd.c\n./test_gcd\nFAIL gcd_basic\nFAIL gcd_negative\n");
  assert.match(podman.stderr, /^make: \*\*\* \[Makefile:\d+: check\] Error 1\n$/);
  assert.deepEqual(outcome(inSandbox(broken)), outcome(podman));
});
