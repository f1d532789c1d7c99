// The console as a person uses it, in Debian's chromium driven by playwright-core: a new user
// signs up, creates a team with a budget and a key (copied from the page), sends chat requests
// through the proxy with it, finds them in the log and the charts, rotates a provider key,
// applies a policy template and finds a redacted request in policy analytics, registers a
// webhook and retries its failed delivery, runs a playground comparison and signs out; a user
// of another organization sees none of it. Every page is checked with axe-core (no serious or
// critical violation), carries the Content-Security-Policy, and is photographed at 1280 and
// 400 px into $GW_CONSOLE_ARTIFACTS (default target/console-screenshots). Scripts injected
// through team names must run nowhere.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { chromium } from 'playwright-core';

const require = createRequire(import.meta.url);
const AXE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = process.env.GW_BIN_DIR || join(ROOT, 'target/debug');
const OUT = process.env.GW_CONSOLE_ARTIFACTS || join(ROOT, 'target/console-screenshots');
const CHROMIUM = process.env.GW_CHROMIUM || '/usr/bin/chromium';
const XSS = ['<script>window.__gwXss = 1</script>', '"><img src=x onerror="window.__gwXss = 2">'];

let stack;
let stackProc;
let browser;
let receiver;
let receiverHits = 0;
const violations = [];
const cspMissing = [];
const shots = [];

function startStack() {
  return new Promise((ok, fail) => {
    stackProc = spawn(join(BIN, 'gw-stack'), [], { env: { ...process.env, GW_BIN_DIR: BIN }, stdio: ['pipe', 'pipe', 'inherit'] });
    let buf = '';
    stackProc.stdout.on('data', (d) => {
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl >= 0 && !stack) {
        stack = JSON.parse(buf.slice(0, nl));
        ok(stack);
      }
    });
    stackProc.on('exit', (code) => {
      if (!stack) fail(new Error(`gw-stack exited with ${code} before printing its addresses`));
    });
  });
}

before(async () => {
  mkdirSync(OUT, { recursive: true });
  await startStack();
  // A webhook endpoint that always fails: its delivery is the one retried from the console.
  receiver = createServer((req, res) => {
    receiverHits += 1;
    req.resume();
    res.writeHead(500, { 'content-type': 'text/plain' }).end('receiver down');
  });
  await new Promise((ok) => receiver.listen(0, '127.0.0.1', ok));
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
});

after(async () => {
  if (browser) await browser.close();
  if (receiver) receiver.close();
  if (stackProc) {
    stackProc.stdin.end();
    await new Promise((ok) => {
      stackProc.on('exit', ok);
      setTimeout(ok, 20000);
    });
  }
});

async function newUser() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.admin });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/the server responded with a status of (4|5)\d\d/.test(m.text())) errors.push(m.text());
  });
  page.on('response', (r) => {
    const url = new URL(r.url());
    const isPage = url.pathname.startsWith('/console') || ['/reset-password', '/accept-invite', '/verify-email'].includes(url.pathname);
    if (isPage && !r.headers()['content-security-policy']) cspMissing.push(url.pathname);
  });
  await page.exposeBinding('gwCspViolation', (_, v) => errors.push(`CSP violation: ${v}`));
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => window.gwCspViolation(`${e.violatedDirective} ${e.blockedURI}`));
  });
  return { context, page, errors };
}

/** Opens `#/<route>` in the running console (a reload would drop the in-memory session). */
async function open(page, route) {
  await page.evaluate((r) => {
    const main = document.getElementById('main');
    if (main) main.dataset.stale = '1';
    if (window.location.hash === `#/${r}`) window.dispatchEvent(new HashChangeEvent('hashchange'));
    else window.location.hash = `#/${r}`;
  }, route);
  await settle(page);
}

/** Waits for the page to finish rendering (a title, nothing loading). */
async function settle(page) {
  await page.waitForFunction(() => {
    const main = document.getElementById('main');
    return main && !main.dataset.stale && document.getElementById('page-title') && !main.textContent.includes('Loading…');
  }, null, { timeout: 30000 });
}

/** axe-core at both widths, and a screenshot at each, named after the page. */
async function check(page, name) {
  for (const [width, height] of [[1280, 900], [400, 860]]) {
    await page.setViewportSize({ width, height });
    await page.evaluate(AXE);
    const found = await page.evaluate(async () => {
      const r = await window.axe.run(document, { resultTypes: ['violations'] });
      return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
        .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`);
    });
    for (const v of found) violations.push(`${name} @${width}px: ${v}`);
    const file = join(OUT, `${name}-${width}.png`);
    await page.screenshot({ path: file, fullPage: true });
    shots.push(file);
  }
  await page.setViewportSize({ width: 1280, height: 900 });
}

async function fill(page, formLabel, values) {
  const form = page.getByRole('form', { name: formLabel, exact: true });
  for (const [label, value] of Object.entries(values)) {
    const field = form.getByLabel(label, { exact: true });
    if (typeof value === 'boolean') await field.setChecked(value);
    else if ((await field.evaluate((e) => e.tagName)) === 'SELECT') await field.selectOption({ label: value });
    else await field.fill(value);
  }
  return form;
}

async function submit(page, formLabel, values, button) {
  const form = await fill(page, formLabel, values);
  await form.getByRole('button', { name: button, exact: true }).click();
}

async function signUp(page, who) {
  const t0 = Date.now();
  const res = await page.goto(`${stack.admin}/console`);
  await page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
  const loadMs = Date.now() - t0;
  assert.ok(res.headers()['content-security-policy'], 'the console page has a CSP');
  await page.getByRole('link', { name: 'Create an organization' }).click();
  await settle(page);
  await check(page, `${who}-signup`);
  const email = `${who}-${Date.now()}@console.example`;
  state[`${who}Email`] = email;
  await submit(page, 'Sign up', {
    'Your name (required)': `${who} Example`,
    'E-mail (required)': email,
    'Password (required)': PASSWORD,
    'Organization name (required)': `${who} corp`,
  }, 'Create organization');
  await page.getByRole('heading', { name: 'Analytics', level: 1 }).waitFor();
  await settle(page);
  return loadMs;
}

async function chat(key, content) {
  const r = await fetch(`${stack.proxy}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content }] }),
  });
  assert.equal(r.status, 200, r.status === 200 ? '' : await r.text());
  return r;
}

/** Re-opens `route` until `check()` holds (the audit writer and rollups trail by a second or so). */
async function until(page, route, what, check, limitMs = 60000) {
  const deadline = Date.now() + limitMs;
  for (;;) {
    await open(page, route);
    if (await check()) return;
    assert.ok(Date.now() < deadline, `gave up waiting for ${what}`);
    await page.waitForTimeout(500);
  }
}

const state = {};
const PASSWORD = 'a long enough password 1';

/** The test's own session for `who` (the console's stays in the page's memory, out of reach). */
async function apiAs(who, method, path, body) {
  if (!state[`${who}Token`]) {
    const r = await fetch(`${stack.admin}/api/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: state[`${who}Email`], password: PASSWORD }),
    });
    const text = await r.text();
    assert.equal(r.status, 200, text);
    state[`${who}Token`] = JSON.parse(text).access_token;
  }
  const r = await fetch(`${stack.admin}/api/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${state[`${who}Token`]}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${text}`);
  return r.status === 204 ? null : JSON.parse(text);
}

test('first load, sign-up and the sign-in pages', async () => {
  // The first load, measured in a browser that has never seen the console.
  const probe = await newUser();
  const t0 = Date.now();
  await probe.page.goto(`${stack.admin}/console`, { waitUntil: 'load' });
  await probe.page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
  const visibleMs = Date.now() - t0;
  const perf = await probe.page.evaluate(() => {
    const nav = performance.getEntriesByType('navigation')[0];
    const res = performance.getEntriesByType('resource');
    return {
      requests: res.length + 1,
      transfer_bytes: nav.transferSize + res.reduce((n, r) => n + r.transferSize, 0),
      decoded_bytes: nav.decodedBodySize + res.reduce((n, r) => n + r.decodedBodySize, 0),
      dom_content_loaded_ms: Math.round(nav.domContentLoadedEventEnd),
      load_ms: Math.round(nav.loadEventEnd),
    };
  });
  const firstLoad = { ...perf, sign_in_form_visible_ms: visibleMs };
  writeFileSync(join(OUT, 'first-load.json'), `${JSON.stringify(firstLoad, null, 2)}\n`);
  console.log(`console first load: ${JSON.stringify(firstLoad)}`);
  await check(probe.page, 'signin');
  for (const route of ['reset', 'api-reference']) {
    await open(probe.page, route);
    await check(probe.page, `public-${route}`);
  }
  // The mailed links are console pages too, with the same headers.
  for (const path of ['/reset-password', '/accept-invite', '/verify-email']) {
    const r = await probe.page.goto(`${stack.admin}${path}#token=abc`);
    assert.match(r.headers()['content-security-policy'], /script-src 'self'/);
    await settle(probe.page);
    // The token is read, then kept out of the address (and the history).
    assert.ok(!probe.page.url().includes('abc'), probe.page.url());
    await check(probe.page, `link${path.replace('/', '-')}`);
  }
  // The identity provider's browser forward: a sign-in that cannot complete says so.
  await probe.page.goto(`${stack.admin}/api/v1/auth/sso/callback?code=abc&state=not-a-state`);
  await probe.page.getByRole('heading', { name: 'Single sign-on failed', level: 1 }).waitFor();
  assert.match(probe.page.url(), /\/console#\/sso-callback\?code=abc/);
  await check(probe.page, 'sso-callback');
  assert.deepEqual(probe.errors, []);
  await probe.context.close();

  const a = await newUser();
  state.a = a;
  await signUp(a.page, 'a');
});

test('a team with a budget, and names that carry scripts', async () => {
  const { page } = state.a;
  await open(page, 'teams');
  await submit(page, 'Create team', { 'Name (required)': 'Support', 'Budget (US dollars per period)': '5' }, 'Create team');
  await page.getByRole('heading', { name: 'Team Support', level: 1 }).waitFor();
  await settle(page);
  state.teamId = page.url().split('#/teams/')[1];
  assert.ok(await page.getByText('of $5 per month').first().isVisible());
  await check(page, 'team');
  // A save from the console changes what its form changed, and keeps what it does not show.
  await apiAs('a', 'PATCH', `/teams/${state.teamId}`, {
    budget: { amount_usd: '5', period: 'month', alert_thresholds: [10, 20], hard_limit: true },
    rate_limits: { max_concurrent: 3 },
  });
  await open(page, `teams/${state.teamId}`);
  await submit(page, 'Team settings', { 'Budget (US dollars per period)': '6' }, 'Save');
  await page.getByText('Team saved.').waitFor();
  const saved = await apiAs('a', 'GET', `/teams/${state.teamId}`);
  assert.equal(Number(saved.budget.amount_usd), 6);
  assert.deepEqual(saved.budget.alert_thresholds, [10, 20]);
  assert.equal(saved.rate_limits.max_concurrent, 3);
  for (const name of XSS) {
    await open(page, 'teams');
    await submit(page, 'Create team', { 'Name (required)': name }, 'Create team');
    await page.getByRole('heading', { name: `Team ${name}`, level: 1 }).waitFor();
    await settle(page);
  }
  await open(page, 'teams');
  for (const name of XSS) assert.ok(await page.getByRole('link', { name, exact: true }).isVisible(), `${name} shown as text`);
  await check(page, 'teams');
  assert.equal(await page.evaluate(() => window.__gwXss), undefined);
});

test('a key created, its secret copied, and chat requests through the proxy', async () => {
  const { page } = state.a;
  await open(page, 'keys');
  await submit(page, 'Create API key', { 'Name (required)': 'app key', Team: 'Support' }, 'Create key');
  const secretField = page.getByRole('textbox', { name: 'Secret of key app key', exact: true });
  await secretField.waitFor();
  await page.getByRole('button', { name: 'Copy Secret of key app key' }).click();
  await page.getByText('Copied to the clipboard.').waitFor();
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  assert.equal(copied, await secretField.inputValue());
  assert.match(copied, /^sk_/);
  assert.ok(await page.getByText('Shown once.').isVisible());
  await check(page, 'keys');
  state.key = copied;
  for (let i = 0; i < 3; i += 1) await chat(copied, `hello from the console test ${i}`);
});

test('the requests in the log, with their cost, and in the charts', async () => {
  const { page } = state.a;
  await until(page, 'logs', 'three requests in the log', async () => (await page.locator('main tbody tr').count()) === 3);
  const costs = await page.locator('main tbody td[data-label="Cost"]').allTextContents();
  assert.equal(costs.length, 3);
  for (const c of costs) assert.ok(/^\$\d/.test(c) && Number(c.slice(1)) > 0, `a cost: ${c}`);
  await check(page, 'logs');
  await page.locator('main tbody td[data-label="When"] a').first().click();
  await page.getByRole('heading', { name: /^Request [0-9a-f-]{36}$/, level: 1 }).waitFor();
  await settle(page);
  assert.ok(await page.getByRole('heading', { name: 'Routing attempts' }).isVisible());
  assert.ok(await page.getByRole('heading', { name: 'Audit chain link' }).isVisible());
  assert.equal(await page.locator('table:has(caption:text("Upstream attempts, in order")) tbody tr').count(), 1);
  await check(page, 'log-entry');
  const byTeam = `overview?period=7d&group_by=team`;
  await until(page, byTeam, 'the requests in the charts', async () => {
    const label = await page.locator('figure:has(figcaption:text("Requests by team")) svg').getAttribute('aria-label');
    return label.includes('Support 3');
  });
  const spend = await page.locator('figure:has(figcaption:text("Spend by team (USD)")) svg').getAttribute('aria-label');
  assert.match(spend, /Support \$0\.\d*[1-9]/);
  await check(page, 'overview');
  assert.equal(await page.evaluate(() => window.__gwXss), undefined, 'team names in the charts stay text');
});

test('a provider key added and rotated', async () => {
  const { page } = state.a;
  await open(page, 'provider-keys');
  await submit(page, 'Add provider key', { 'Name (required)': 'primary', 'Provider (required)': 'upstream', 'Secret (required)': 'sk-upstream-first-secret-0001' }, 'Add key');
  await page.getByRole('cell', { name: '…0001' }).or(page.getByText(/0001$/)).first().waitFor();
  await page.getByText('Rotate primary', { exact: true }).click();
  await submit(page, 'Rotate primary', { 'New secret for primary (required)': 'sk-upstream-second-secret-0002' }, 'Rotate');
  await page.getByText('rotated to version 2').waitFor();
  await settle(page);
  const row = page.locator('main tbody tr', { hasText: 'primary' });
  assert.equal(await row.locator('td[data-label="Version"]').textContent(), '2');
  assert.ok(!(await page.content()).includes('sk-upstream-second-secret-0002'), 'only the hint is shown');
  await check(page, 'provider-keys');
});

test('a policy template applied and a redacted request in policy analytics', async () => {
  const { page } = state.a;
  await open(page, 'policies');
  await page.getByRole('button', { name: 'Apply strict_pii', exact: true }).click();
  await page.getByText('Template strict_pii applied.').waitFor();
  await settle(page);
  await check(page, 'policies');
  // A document the server refuses shows its errors at the editor.
  await fill(page, 'Policy document', { 'Policy document (JSON) (required)': '{"defaults": ["no_such_policy"]}' });
  await page.getByRole('button', { name: 'Save document' }).click();
  await page.locator('.field-error:has-text("defaults")').waitFor();
  assert.equal(await page.getByLabel('Policy document (JSON) (required)').getAttribute('aria-invalid'), 'true');
  const r = await chat(state.key, 'please mail jane.doe@example.com the report');
  assert.equal(r.headers.get('x-gw-policy-action'), 'redacted');
  await until(page, 'policy-analytics?action=redacted', 'the redacted request in policy analytics', async () => (await page.locator('main tbody tr').count()) > 0);
  const actions = await page.locator('main tbody td[data-label="Action"]').allTextContents();
  assert.ok(actions.every((a) => a === 'redacted') && actions.length > 0);
  await check(page, 'policy-analytics');
  await open(page, 'logs?policy_action=redacted');
  assert.equal(await page.locator('main tbody tr').count(), 1);
});

test('a webhook registered and its failed delivery retried', async () => {
  const { page } = state.a;
  await open(page, 'webhooks');
  const url = `http://127.0.0.1:${receiver.address().port}/hook`;
  await submit(page, 'Add webhook', { 'URL (required)': url }, 'Add endpoint');
  await page.getByRole('textbox', { name: 'Signing secret', exact: true }).waitFor();
  assert.match(await page.getByRole('textbox', { name: 'Signing secret', exact: true }).inputValue(), /^whsec_/);
  await settle(page);
  await page.getByRole('button', { name: 'Send a test event' }).click();
  const row = () => page.locator('main tbody tr', { hasText: 'webhook.test' });
  const deadline = Date.now() + 60000;
  while (!((await row().count()) === 1 && Number(await row().locator('td[data-label="Attempts"]').textContent()) >= 1)) {
    assert.ok(Date.now() < deadline, 'gave up waiting for the failed delivery');
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.waitForTimeout(300);
  }
  const before = Number(await row().locator('td[data-label="Attempts"]').textContent());
  const hits = receiverHits;
  await row().getByRole('button', { name: /^Retry/ }).click();
  await page.getByText(/^Retried: /).waitFor();
  await settle(page);
  const afterAttempts = Number(await row().locator('td[data-label="Attempts"]').textContent());
  assert.ok(afterAttempts > before, `attempts ${before} → ${afterAttempts}`);
  assert.ok(receiverHits > hits, 'the retry reached the endpoint');
  assert.match(await row().locator('td[data-label="Last answer"]').textContent(), /500.*by hand/);
  await check(page, 'webhook');
});

test('a playground comparison', async () => {
  const { page } = state.a;
  await open(page, 'playground');
  await submit(page, 'Compare models', { 'Models (2 to 8, comma-separated) (required)': 'gpt-4o-mini, claude-test', 'User message': 'Say hello' }, 'Compare');
  await page.getByRole('article', { name: 'Answer of claude-test' }).waitFor({ timeout: 60000 });
  for (const m of ['gpt-4o-mini', 'claude-test']) {
    const card = page.getByRole('article', { name: `Answer of ${m}` });
    assert.ok(/\$0\.\d/.test(await card.textContent()), `${m} has a cost`);
    assert.equal(await card.locator('pre').count(), 1, `${m} answered`);
  }
  await check(page, 'playground');
});

test('every other page: reachable, accessible, photographed', async () => {
  const { page, errors } = state.a;
  for (const route of ['organization', 'members', 'service-accounts', 'billing', 'sso-connections', 'audit', 'cache',
    'routes', 'gateway', 'reconciliation', 'templates', 'experiments', 'account', 'api-reference']) {
    await open(page, route);
    await check(page, route);
  }
  // The API reference sends an operation; a public one refusing (a wrong password) leaves the
  // console's own session alone.
  await open(page, 'api-reference');
  const login = page.locator('details.op', { has: page.locator('summary code', { hasText: /^\/api\/v1\/auth\/login$/ }) });
  await login.locator('summary').click();
  await login.getByLabel('Body (JSON)').fill('{"email": "nobody@console.example", "password": "not the password"}');
  await login.getByRole('button', { name: 'Send' }).click();
  await login.getByText(/^401 unauthorized: /).waitFor();
  await open(page, 'teams');
  assert.ok(await page.getByRole('button', { name: 'Sign out' }).isVisible(), 'still signed in');
  // A template and an experiment, so their own pages have something to show.
  await open(page, 'templates');
  await submit(page, 'Create template', { 'Name (required)': 'summary' }, 'Create template');
  await page.getByRole('link', { name: 'summary' }).click();
  await settle(page);
  await check(page, 'template');
  await open(page, 'experiments');
  await submit(page, 'Create experiment', { 'Name (required)': 'mini vs claude', 'Traffic: requests for this model': 'gpt-4o-mini',
    'Variants (JSON; the first is the control) (required)': '[{"name":"control","model":"gpt-4o-mini","weight":50},{"name":"candidate","model":"claude-test","weight":50}]' },
  'Create experiment');
  await page.getByRole('link', { name: 'mini vs claude' }).click();
  await settle(page);
  await check(page, 'experiment');
  await open(page, `keys`);
  await page.getByRole('link', { name: 'app key' }).click();
  await settle(page);
  await check(page, 'key');
  // The narrow layout's menu works from the keyboard.
  await page.setViewportSize({ width: 400, height: 860 });
  const menu = page.getByRole('button', { name: 'Menu' });
  await menu.focus();
  await page.keyboard.press('Enter');
  assert.equal(await menu.getAttribute('aria-expanded'), 'true');
  assert.ok(await page.getByRole('link', { name: 'Request log' }).isVisible());
  await page.setViewportSize({ width: 1280, height: 900 });
  assert.equal(await page.evaluate(() => window.__gwXss), undefined);
  assert.deepEqual(errors, []);
});

test('signing out forgets the session', async () => {
  const { page } = state.a;
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
  await page.evaluate(() => { window.location.hash = '#/teams'; });
  await page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie);
  assert.ok(!stored.includes('eyJ') && !stored.includes(state.key), 'no token kept in the browser');
  await state.a.context.close();
});

test('another organization sees none of it', async () => {
  const b = await newUser();
  await signUp(b.page, 'b');
  await open(b.page, 'teams');
  assert.equal(await b.page.locator('main').getByText('Support').count(), 0);
  assert.ok(await b.page.getByText('Nothing here yet.').first().isVisible());
  await open(b.page, 'keys');
  assert.equal(await b.page.getByText('app key').count(), 0);
  await open(b.page, 'logs');
  assert.ok(await b.page.getByText('No requests match.').isVisible());
  await open(b.page, 'provider-keys');
  assert.equal(await b.page.getByText('primary').count(), 0);
  await open(b.page, 'webhooks');
  assert.equal(await b.page.getByText('/hook').count(), 0);
  await open(b.page, `teams/${state.teamId}`);
  assert.ok(await b.page.getByText('404 not_found').isVisible(), 'another organization’s team is not found');
  await open(b.page, 'policy-analytics');
  assert.ok(await b.page.getByText('No guardrail acted in this period.').isVisible());
  await b.context.close();
});

test('no serious accessibility violation, a CSP on every page, no script from a team name', () => {
  writeFileSync(join(OUT, 'axe-violations.txt'), violations.join('\n'));
  assert.deepEqual(violations, []);
  assert.deepEqual(cspMissing, []);
  assert.ok(shots.length >= 40, `${shots.length} screenshots`);
});
