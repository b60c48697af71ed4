// The web page of sbx serve in a real browser: Debian's chromium, headless,
// driven by puppeteer-core, against the real server and the scripted model
// server that tests/integration/test_web.c started. Runs are submitted
// with a bearer token, as a client would; everything else is done in the
// page, as a person would, mostly from the keyboard.
//
// Environment: SBX_URL, SBX_TOKEN (scopes read,run,approve), SBX_READER (a
// read token), SBX_REASON (the rejection's reason), SBX_SHOTS (where the
// screenshots go), SBX_WEB_NODE (puppeteer-core's node_modules' parent),
// SBX_CHROMIUM. Asks the test to restart the server by printing "restart"
// and waits for a line on stdin. Exits 0 when every check held; progress
// and failures go to stderr.
import {createRequire} from 'node:module';
import {mkdtempSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {createInterface} from 'node:readline';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const URL = env('SBX_URL');
const TOKEN = env('SBX_TOKEN');
const READER = env('SBX_READER');
const REASON = env('SBX_REASON');
const SHOTS = env('SBX_SHOTS');
const require = createRequire(join(env('SBX_WEB_NODE'), 'package.json'));
const puppeteer = require('puppeteer-core');

const AGENT = {name: 'Helper', model: 'm1'};
const AGENT_ASK = {name: 'Careful', model: 'm1',
                   approvals: {exec_command: 'always'}};

const log = (...a) => console.error('ui:', ...a);
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

async function api(method, path, body) {
  const r = await fetch(URL + path, {
    method,
    headers: {Authorization: `Bearer ${TOKEN}`,
              'Content-Type': 'application/json'},
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const submit = async (agent, extra) =>
  (await api('POST', '/v1/runs', {agent, input: 'say hi', ...extra})).id;

async function waitRun(id, status, ms = 60000) {
  const t0 = Date.now();
  for (;;) {
    const run = await api('GET', `/v1/runs/${id}`);
    if (run.status === status) return run;
    if (Date.now() - t0 > ms) {
      throw new Error(`run ${id} is ${run.status}, not ${status}`);
    }
    await sleep(200);
  }
}

// The line the test writes back once it restarted the server.
const stdin = createInterface({input: process.stdin});
const lines = stdin[Symbol.asyncIterator]();
async function restartServer() {
  process.stdout.write('restart\n');
  const {value, done} = await lines.next();
  check(!done && value.trim() === 'restarted', 'the server restarted');
}

const problems = [];
let page;
const shot = (name) => page.screenshot({path: join(SHOTS, `${name}.png`),
                                        fullPage: true});
const text = (sel) => page.$eval(sel, (e) => e.textContent);
const count = (sel) => page.$$eval(sel, (l) => l.length);
const go = async (hash) => {
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.waitForSelector(`#view[data-route="${hash}"] h1`);
};

// The events shown on the run page, checked to be 1..N once each: their
// number.
async function checkSeqs(what) {
  const seqs = await page.$$eval('.events li', (l) =>
    l.flatMap((e) => e.dataset.seqs.split(' ').map(Number)));
  seqs.sort((x, y) => x - y);
  seqs.forEach((s, i) => check(s === i + 1,
                               `${what}: event ${i + 1} is #${s} (${seqs})`));
  return seqs.length;
}

async function loginAs(token, name) {
  await page.waitForSelector('#token', {visible: true});
  await page.focus('#token');
  await page.keyboard.type(token);
  await page.keyboard.press('Enter');
  await page.waitForFunction((n) =>
    document.getElementById('who-name').textContent.startsWith(n), {}, name);
}

async function main(browser) {
  page = await browser.newPage();
  page.setDefaultTimeout(30000);
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (/Content.Security.Policy|Refused to/i.test(m.text())) {
      problems.push(`console: ${m.text()}`);
    }
  });
  page.on('dialog', (d) => d.accept());
  await page.setViewport({width: 1280, height: 800});

  log('log in');
  await page.goto(URL + '/');
  await page.waitForSelector('#login-form', {visible: true});
  check(await page.evaluate(() => document.activeElement.id) === 'token',
        'the token field has the focus');
  check(await page.$$eval('button, nav a', (l) =>
    l.filter((e) => e.checkVisibility()).map((e) => e.textContent).join()) ===
        'Log in', 'before a login, the only button is Log in');
  await page.keyboard.type('sbx_000000000000_' + '0'.repeat(40));
  await page.keyboard.press('Enter');
  await page.waitForFunction(() =>
    document.getElementById('login-error').textContent.includes('Not logged in'));
  await shot('login-refused');
  await page.$eval('#token', (e) => { e.value = ''; });
  await loginAs(TOKEN, 'ops');
  const cookies = await page.cookies();
  const c = cookies.find((k) => k.name === 'sbx_session');
  check(c && c.httpOnly && c.sameSite === 'Strict', 'an HttpOnly, Strict cookie');
  check(await page.evaluate(() => document.cookie) === '',
        'script cannot read the cookie');

  log('a run streams to its end');
  const a = await submit(AGENT);
  await page.waitForSelector(`tr[data-run="${a}"]`);
  check(/^\d+ s ago$/.test(await text(`tr[data-run="${a}"] time`)),
        'the run\'s age');
  await shot('runs');
  await page.click(`tr[data-run="${a}"] a`);
  await page.waitForSelector('.events li[data-type=tool_call_started]');
  await page.waitForSelector('.events li[data-type=run_finished]', {timeout: 60000});
  const call = await text('.events li[data-type=tool_call_started]');
  check(call.includes('exec_command') && call.includes('echo hi > f'),
        `the call and its arguments: ${call}`);
  check(call.includes('completed') && /Output[\s\S]*hi/.test(call),
        `the call's output: ${call}`);
  check((await text('.events li[data-type=run_finished]')).includes('done: hi'),
        'the final answer');
  await page.waitForFunction(() =>
    document.querySelector('.run-head').textContent.includes('completed'));
  await checkSeqs('a finished run');
  await shot('run');

  log('a run waiting for approval is approved in the page');
  const b = await submit(AGENT_ASK);
  await waitRun(b, 'waiting_approval');
  await go('#/approvals');
  const card = `[data-approval="${b}/c1"]`;
  await page.waitForSelector(card);
  check((await text(card)).includes('echo hi > f'), 'the arguments are shown');
  await page.waitForFunction(() =>
    /^\(\d+\)$/.test(document.getElementById('pending-count').textContent));
  await shot('approvals');
  await page.focus(`${card} button.approve`);
  await page.keyboard.press('Enter');
  await page.waitForSelector(card, {hidden: true});
  await waitRun(b, 'completed');

  log('a rejection with a reason');
  const cr = await submit(AGENT_ASK);
  await waitRun(cr, 'waiting_approval');
  const rcard = `[data-approval="${cr}/c1"]`;
  await page.waitForSelector(rcard);
  await page.focus(`${rcard} input`);
  await page.keyboard.type(REASON);
  await page.click(`${rcard} button.danger`);
  await page.waitForSelector(rcard, {hidden: true});
  await waitRun(cr, 'completed');

  log('cancel and retry');
  const e = await submit(AGENT_ASK);
  await waitRun(e, 'waiting_approval');
  await go(`#/runs/${e}`);
  await page.waitForSelector('.events li[data-type=run_paused]');
  await page.waitForSelector('.run-actions button.danger');
  await page.click('.run-actions button.danger');
  await waitRun(e, 'cancelled');
  await page.waitForSelector('.events li[data-type=run_cancelled]');
  const g = await submit(AGENT, {max_turns: 1});
  await waitRun(g, 'failed');
  await go(`#/runs/${g}`);
  await page.waitForSelector('.events li[data-type=run_failed]');
  const retry = await page.waitForSelector('.run-actions button:not(.danger)');
  check((await retry.evaluate((x) => x.textContent)) === 'Retry', 'a Retry button');
  await retry.click();
  await page.waitForFunction(() =>
    document.getElementById('status').textContent.includes('queued again'));
  // The page takes the retried run's events up where they stopped.
  await page.waitForFunction(() =>
    document.querySelectorAll('.events li[data-type=run_started]').length === 2,
  {timeout: 60000});
  await page.waitForFunction(() =>
    document.querySelectorAll('.events li[data-type=run_failed], ' +
                              '.events li[data-type=run_finished]').length === 2,
  {timeout: 60000});
  await checkSeqs('a retried run');

  log('sandboxes');
  const sb = await api('POST', '/v1/sandboxes', {});
  await go('#/sandboxes');
  await page.waitForSelector(`tr[data-sandbox="${sb.id}"]`);
  check(/^\d+ s ago$/.test(await text(`tr[data-sandbox="${sb.id}"] time`)),
        'the sandbox\'s age');
  check(await text(`tr[data-sandbox="${sb.id}"] td[data-label="Status"]`) ===
            'running',
        'the sandbox\'s status');
  await shot('sandboxes');
  await page.click(`tr[data-sandbox="${sb.id}"] button`);
  await page.waitForSelector(`tr[data-sandbox="${sb.id}"]`, {hidden: true});
  const gone = await fetch(`${URL}/v1/sandboxes/${sb.id}`,
                           {headers: {Authorization: `Bearer ${TOKEN}`}});
  check(gone.status === 404, `the sandbox is deleted (${gone.status})`);

  log('the page survives a server restart mid-run');
  const d = await submit(AGENT);
  await go(`#/runs/${d}`);
  await page.waitForSelector('.events .call-completed');
  await restartServer();
  await page.waitForSelector('.events li[data-type=run_finished]', {timeout: 90000});
  const before = await checkSeqs('a run across a restart');
  check(await count('.events li[data-type=run_started]') === 2,
        'the run started again after the restart');
  await page.reload();
  await page.waitForSelector('.events li[data-type=run_finished]');
  check(await checkSeqs('the same run after a reload') === before,
        'a reload shows every event once');
  await go('#/runs');
  await page.waitForSelector(`tr[data-run="${d}"] .st-completed`);

  log('1280 px and phone width');
  const views = [['#/runs', 'runs', 'tr[data-run]'],
                 [`#/runs/${a}`, 'run', '.events li[data-type=run_finished]'],
                 ['#/approvals', 'approvals', '.approvals'],
                 ['#/sandboxes', 'sandboxes', 'table']];
  for (const width of [1280, 390]) {
    await page.setViewport({width, height: 844, isMobile: width < 500});
    for (const [hash, name, loaded] of views) {
      await go(hash);
      await page.waitForSelector(loaded);
      await sleep(300);
      if (width < 500) await shot(`phone-${name}`);
      const w = await page.evaluate(() => document.documentElement.scrollWidth);
      check(w <= width, `${name} fits ${width} px (${w} px wide)`);
    }
  }
  await page.setViewport({width: 1280, height: 800});

  log('a read token sees no action');
  const f = await submit(AGENT_ASK);
  await waitRun(f, 'waiting_approval');
  const sb2 = await api('POST', '/v1/sandboxes', {});
  await page.click('#logout');
  await page.waitForSelector('#login-form', {visible: true});
  await page.waitForSelector('#logout', {hidden: true});
  await loginAs(READER, 'reader');
  for (const [hash, sel] of [['#/runs', `tr[data-run="${f}"]`],
                             [`#/runs/${f}`, '.events li[data-type=run_paused]'],
                             ['#/approvals', `[data-approval="${f}/c1"]`],
                             ['#/sandboxes', `tr[data-sandbox="${sb2.id}"]`]]) {
    await go(hash);
    await page.waitForSelector(sel);
    await sleep(300);
    const buttons = await page.$$eval('#view button', (l) => l.map((x) => x.textContent));
    check(buttons.length === 0, `no buttons on ${hash} for a reader: ${buttons}`);
    if (hash === '#/approvals') await shot('reader-approvals');
  }
  const refused = await page.evaluate(async (id) => {
    const s = await (await fetch('/ui/session')).json();
    const r = await fetch(`/v1/runs/${id}/approvals/c1`, {
      method: 'POST', headers: {'X-CSRF-Token': s.csrf, 'Content-Type': 'application/json'},
      body: JSON.stringify({decision: 'approve'})});
    return r.status;
  }, f);
  check(refused === 403, `the server refuses a reader's approval (${refused})`);
  check((await api('GET', `/v1/runs/${f}`)).status === 'waiting_approval',
        'the run still waits');
  await api('DELETE', `/v1/sandboxes/${sb2.id}`);

  check(problems.length === 0, problems.join('; '));
}

const profile = mkdtempSync(join(tmpdir(), 'sbx-chromium-'));
let browser;
let rc = 1;
try {
  browser = await puppeteer.launch({
    executablePath: env('SBX_CHROMIUM'),
    headless: true,
    pipe: true,
    userDataDir: profile,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
           '--disable-background-networking', '--disable-component-update',
           '--disable-sync'],
  });
  await main(browser);
  log('every check held');
  rc = 0;
} catch (err) {
  log(err.stack || String(err));
  if (page) await shot('failure').catch(() => {});
} finally {
  if (browser) await browser.close().catch(() => {});
  rmSync(profile, {recursive: true, force: true});
  stdin.close();
}
process.exit(rc);
