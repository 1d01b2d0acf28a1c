// Drives examples/web/index.html (PAGE_URL: served over http, or a file:// URL) in headless
// Debian Chromium through the bridge. Run by tests/e2e/test_browser.py, which reads the JSON
// lines this prints:
//   {"event":"subscribed"}  the page is connected and subscribed: send it messages now
//   {"event":"sent"}        the page sent SEND_BODY and saw it come back on its topic
// and expects the page to show every body in EXPECT (comma-separated) before it sends.
// With EXPECT_REFUSED=1 it only waits for the page to report that it could not connect:
//   {"event":"refused"}
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const env = (name) => {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};
const say = (event, extra = {}) => console.log(JSON.stringify({ event, ...extra }));
const TIMEOUT = 20000;

const page_url = env("PAGE_URL") + "?" + new URLSearchParams({
  url: env("WS_URL"),
  destination: env("DESTINATION"),
});
const expected = (process.env.EXPECT || "").split(",").filter(Boolean);
const userDataDir = mkdtempSync(join(tmpdir(), "stomp-bridge-chromium-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
  viewport: { width: 1000, height: 640 },
});
async function drive(page) {
  page.on("console", (msg) => msg.type() === "error" && say("console-error", { text: msg.text() }));
  page.on("pageerror", (err) => say("page-error", { text: String(err) }));
  await page.goto(page_url);
  await page.click("#connect");
  if (process.env.EXPECT_REFUSED === "1") {
    await page.waitForSelector("#status.error", { timeout: TIMEOUT });
    say("refused", { status: await page.textContent("#status") });
    return;
  }
  await page.waitForSelector("#status.connected", { timeout: TIMEOUT });
  say("subscribed", { status: await page.textContent("#status") });

  for (const body of expected) {
    await page.locator("#messages li .body", { hasText: body }).first().waitFor({ timeout: TIMEOUT });
  }
  const ownBody = env("SEND_BODY");
  await page.fill("#body", ownBody);
  await page.click("#send");
  await page.locator("#messages li .body", { hasText: ownBody }).first().waitFor({ timeout: TIMEOUT });
  say("sent", { shown: await page.locator("#messages li .body").allTextContents() });
}

try {
  const page = context.pages()[0] || (await context.newPage());
  await drive(page);
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
  say("done");
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
