/** HTML evaluation reports in Chromium (eval-report.browser.ts); a loud skip where there is none. */
import { browserSuite } from "./browser.js";

await browserSuite("HTML evaluation reports, in Chromium from disk", () => import("./eval-report.browser.js"));
