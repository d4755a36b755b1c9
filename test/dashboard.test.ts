/** The dashboard and the trajectory viewer in Chromium (dashboard.browser.ts); a loud skip where there is none. */
import { browserSuite } from "./browser.js";

await browserSuite("the dashboard of a real server, in Chromium", () => import("./dashboard.browser.js"));
