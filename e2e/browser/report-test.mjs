// Opens a `kascade explain` HTML report in headless Chromium and checks what
// a person sees: the first finding's title (from the JSON report of the same
// run) in the first finding, open; an expected text; a collapsed object in
// the tree that opens when clicked; a link to a finding that opens it; no
// console or page errors. Saves a full-page screenshot.
//
//   node report-test.mjs --html R.html --json R.json [--expect TEXT] [--screenshot PNG]
//
// Environment: KASCADE_BROWSER_MODULES (node_modules with playwright-core),
// CHROMIUM (the browser, default /usr/bin/chromium). Playwright waits for
// each condition itself (generous timeouts): nothing depends on speed.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

function args() {
  const out = { screenshot: "target/explain/report.png", expect: [] };
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i += 2) {
    const key = a[i].replace(/^--/, "");
    if (key === "expect") out.expect.push(a[i + 1]);
    else out[key] = a[i + 1];
  }
  for (const need of ["html", "json"]) {
    if (!out[need]) throw new Error(`--${need} is required`);
  }
  return out;
}

const opts = args();
const modules = process.env.KASCADE_BROWSER_MODULES;
if (!modules) throw new Error("KASCADE_BROWSER_MODULES is not set: run e2e/browser/run.sh");
const { chromium } = await import(pathToFileURL(resolve(modules, "playwright-core/index.mjs")).href);
const report = JSON.parse(readFileSync(opts.json, "utf8"));
const url = pathToFileURL(resolve(opts.html)).href;

const failures = [];
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures.push(what);
};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  page.setDefaultTimeout(30_000);
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(`console: ${m.text()}`); });
  page.on("pageerror", (e) => errors.push(`page: ${e.message}`));
  page.on("request", (r) => { if (!r.url().startsWith("file:")) errors.push(`network: ${r.url()}`); });
  await page.goto(url);

  const first = report.findings[0];
  check(first !== undefined, "the report has a finding");
  if (first) {
    const summary = page.locator(`details#${first.id} > summary`);
    await summary.waitFor({ state: "visible" });
    const title = (await summary.locator(".ftitle").innerText()).trim();
    check(title === first.title, `the first finding shows its title: ${JSON.stringify(title)}`);
    check(await page.locator(`details#${first.id}`).evaluate((d) => d.open), "the first finding is open");
    for (const text of opts.expect) {
      check((await summary.innerText()).includes(text), `the first finding says ${JSON.stringify(text)}`);
    }
    const chain = await page.locator(`details#${first.id} .chain .step`).allInnerTexts();
    check(chain.length === first.chain.length, `its chain shows ${first.chain.length} objects`);

    // A collapsed object in the tree opens when clicked.
    const tree = page.locator("ul.tree details").first();
    check(await tree.count() === 1, "the object tree has an object with objects under it");
    if (await tree.count() === 1) {
      const child = tree.locator(":scope > ul > li").first();
      if (await tree.evaluate((d) => d.open)) {
        await tree.locator(":scope > summary").click();
        await child.waitFor({ state: "hidden" });
      }
      await tree.locator(":scope > summary").click();
      await child.waitFor({ state: "visible" });
      check(await child.isVisible(), "clicking an object in the tree shows what is under it");
    }

    // A link to a finding (as from the tree, or a URL with #F1) opens it.
    await summary.click();
    await page.waitForFunction((id) => !document.getElementById(id).open, first.id);
    await page.locator(`a.flink[href="#${first.id}"]`).first().click();
    await page.waitForFunction((id) => document.getElementById(id).open, first.id);
    check(true, `following a link to #${first.id} opens the finding`);
  }
  await page.screenshot({ path: opts.screenshot, fullPage: true });
  check(errors.length === 0, `no console, page or network errors${errors.length ? ": " + errors.join("; ") : ""}`);
} finally {
  await browser.close();
}
console.log(`screenshot: ${resolve(opts.screenshot)}`);
if (failures.length) {
  console.error(`${failures.length} check(s) failed`);
  process.exit(1);
}
