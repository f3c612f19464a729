// The dashboard's real-browser test: drives the page a head serves in headless Chromium, as a
// person would, against a live cluster that actors/tests/dashboard.rs (or a person) set up.
//
// Environment:
//   FTDRIVE_URL         the head's URL (http://127.0.0.1:PORT)
//   FTDRIVE_TOKEN       its client API token
//   FTDRIVE_JOB         a job that lost a node in cycle 1 (a `node_lost` / `system` ledger row),
//                       recovered, and is still RUNNING its second cycle; the operator has
//                       drained the lost node (`ftdrive drain`) since; it has a run_timeout_ms
//   FTDRIVE_WAITING_JOB a job PENDING because every node is busy (optional: checked when set)
//   FTDRIVE_PORTLESS_NODE an ALIVE node its machine left no rendezvous port (optional: checked
//                       when set)
//   FTDRIVE_SCREENSHOT  where to save a full-page PNG of the job page (default dashboard.png);
//                       a second one, `<name>-succeeded.png`, shows the page once the job ended
//   FTDRIVE_CHROMIUM    the browser (default /usr/bin/chromium)
//   FTDRIVE_END_WAIT_MS how long to wait for the job to end (default 60000)
//
// Exits 0 when every check passed, 1 with a FAIL line saying what did not hold.

import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  // The machine has no outside network: without these Chromium keeps dialling out.
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];
const STEP_TIMEOUT_MS = 15_000;

class CheckFailed extends Error {}

function fail(message) {
  throw new CheckFailed(message);
}

function ok(what) {
  console.log(`ok - ${what}`);
}

function settings() {
  const missing = ['FTDRIVE_URL', 'FTDRIVE_TOKEN', 'FTDRIVE_JOB'].filter((name) => !process.env[name]);
  if (missing.length) fail(`set ${missing.join(', ')} (see the comment at the top of this file)`);
  return {
    url: process.env.FTDRIVE_URL.trim().replace(/\/$/, ''),
    token: process.env.FTDRIVE_TOKEN.trim(),
    job: process.env.FTDRIVE_JOB.trim(),
    waitingJob: (process.env.FTDRIVE_WAITING_JOB || '').trim(),
    portlessNode: (process.env.FTDRIVE_PORTLESS_NODE || '').trim(),
    screenshot: path.resolve(process.env.FTDRIVE_SCREENSHOT || 'dashboard.png'),
    chromium: process.env.FTDRIVE_CHROMIUM || '/usr/bin/chromium',
    endWaitMs: Number(process.env.FTDRIVE_END_WAIT_MS || 60_000),
    // The head's process id, to stop it for a moment: the page must notice its silence.
    headPid: Number(process.env.FTDRIVE_HEAD_PID || 0),
  };
}

/** Waits until `locator` (its first match) is visible, or fails saying what was expected. */
async function visible(locator, what, timeout = STEP_TIMEOUT_MS) {
  try {
    await locator.first().waitFor({ state: 'visible', timeout });
  } catch {
    fail(`${what}: not shown within ${timeout / 1000} s`);
  }
  return locator.first();
}

/** Waits until `locator`'s text contains `text`. */
async function textContains(locator, text, what, timeout = STEP_TIMEOUT_MS) {
  const deadline = Date.now() + timeout;
  let last = '';
  while (Date.now() < deadline) {
    last = (await locator.first().textContent().catch(() => '')) || '';
    if (last.includes(text)) return last;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  fail(`${what}: expected text "${text}", found "${last.trim()}"`);
}

async function count(locator) {
  return locator.count();
}

/** Console errors and uncaught exceptions (a CSP violation shows up as one). */
function watchForErrors(page) {
  const problems = [];
  page.on('pageerror', (error) => problems.push(`uncaught: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    // The wrong-token step gets its 401 on purpose; Chromium logs every non-2xx fetch.
    const wrongToken = /status of 401/.test(message.text()) && message.location().url.endsWith('/v1/health');
    if (wrongToken && problems.expect401) return;
    if (/status of 404/.test(message.text()) && problems.expect404) return;
    problems.push(`console: ${message.text()} (${message.location().url})`);
  });
  return problems;
}

async function signIn(page, s, problems) {
  await page.goto(s.url + '/', { waitUntil: 'domcontentloaded' });
  const input = await visible(page.getByLabel('API token'), 'the token prompt');
  ok('the page asks for the API token');

  problems.expect401 = true;
  await input.fill('not-the-token');
  await page.getByRole('button', { name: 'Open dashboard' }).click();
  await textContains(page.locator('#login-error'), '401', 'the error for a wrong token');
  problems.expect401 = false;
  ok('a wrong token is refused, and the prompt says so (401)');

  await input.fill(s.token);
  await input.press('Enter');
  await visible(page.getByRole('heading', { level: 1, name: 'Jobs' }), 'the jobs page after signing in');
  const stored = await page.evaluate(() => sessionStorage.getItem('ftdrive.token'));
  if (stored !== s.token) fail('the token is not kept in sessionStorage');
  ok('the right token opens the jobs page and is kept in sessionStorage');
}

/** A job waiting for a busy cluster: its row and its page say why, and name who holds the room. */
async function checkWaitingJob(page, s) {
  const row = await visible(page.locator(`#jobs tbody tr[data-job="${s.waitingJob}"]`), `job ${s.waitingJob} in the list`);
  await textContains(row, 'waiting for capacity', `job ${s.waitingJob}'s row`);
  await textContains(row, `in use by ${s.job}`, `job ${s.waitingJob}'s row`);
  const priority = (await row.locator('td').nth(2).innerText()).trim();
  if (priority !== '3') fail(`job ${s.waitingJob}'s row shows priority "${priority}", submitted with 3`);
  await row.getByRole('link', { name: s.waitingJob }).click();
  const callout = await visible(page.locator('[data-waiting]'), `the reason on job ${s.waitingJob}'s page`);
  await textContains(callout, 'waiting for capacity', 'the waiting callout');
  ok(`the jobs list and ${s.waitingJob}'s page say it waits for capacity held by ${s.job}, at priority 3`);
  await page.goBack();
  await visible(page.getByRole('heading', { level: 1, name: 'Jobs' }), 'the jobs page again');
}

/** A link with a malformed escape (typed, or cut short when pasted) opens a page that says the
 * job is unknown; decoding it threw, and the page before stayed on screen under the new URL. */
async function checkMalformedLink(page, problems) {
  problems.expect404 = true;
  await page.evaluate(() => { location.hash = '#/jobs/%E0%A4%A'; });
  await visible(page.getByRole('heading', { level: 1, name: 'Job %E0%A4%A' }), 'the page of a malformed link');
  await textContains(page.locator('#view'), 'Could not load this page', 'the page of a malformed link');
  problems.expect404 = false;
  ok('a link with a malformed escape opens a page saying it could not be loaded, with no uncaught error');
  await page.evaluate(() => { location.hash = '#/jobs'; });
  await visible(page.getByRole('heading', { level: 1, name: 'Jobs' }), 'the jobs page again');
}

/** The jobs page pages back through older jobs (`#/jobs?limit=1` for a page of one): each page
 * links to the next, older one while there is one, and back to the newest. */
async function checkPages(page, s) {
  await page.evaluate(() => { location.hash = '#/jobs?limit=1'; });
  const older = await visible(page.locator('#older-jobs'), 'the link to older jobs on a page of one');
  if (await page.locator('#jobs tbody tr').count() !== 1) fail('a page of one shows one job');
  const newestId = await page.locator('#jobs tbody tr').first().getAttribute('data-job');
  await textContains(older, `before ${newestId}`, 'the link to older jobs');
  await older.click();
  await visible(page.getByRole('heading', { level: 1, name: `Jobs submitted before ${newestId}` }), 'the page of older jobs');
  const rows = page.locator('#jobs tbody tr');
  await visible(rows, 'the job before the newest');
  const olderId = await rows.first().getAttribute('data-job');
  if (![s.job, s.waitingJob].includes(olderId) || olderId === newestId) fail(`the older page shows ${olderId}`);
  if (await page.locator('#older-jobs').count() !== 0) fail('the oldest page links to older jobs');
  await page.locator('#newest-jobs').click();
  await visible(page.getByRole('heading', { level: 1, name: 'Jobs' }), 'the newest jobs again');
  ok(`the jobs page pages back: ${newestId} alone, then the older ${olderId}, and back to the newest`);
  await page.evaluate(() => { location.hash = '#/jobs'; });
  await visible(page.locator(`#jobs tbody tr[data-job="${s.job}"]`), 'the whole list again');
}

async function openJob(page, s) {
  const row = await visible(page.locator(`#jobs tbody tr[data-job="${s.job}"]`), `job ${s.job} in the jobs list`);
  await textContains(row, 'RUNNING', `job ${s.job}'s row`);
  ok(`the jobs list shows ${s.job} RUNNING`);

  // By keyboard: focus the job's link and press Enter.
  await row.getByRole('link', { name: s.job }).focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction((id) => location.hash === `#/jobs/${id}`, s.job, { timeout: STEP_TIMEOUT_MS })
    .catch(() => fail(`opening the job did not lead to #/jobs/${s.job}`));
  await visible(page.getByRole('heading', { level: 1, name: new RegExp(`Job ${s.job}\\b`) }), 'the job page heading');
  const state = await visible(page.locator('[data-job-state]'), 'the job state');
  const shown = (await state.textContent()).trim();
  if (shown !== 'RUNNING') {
    fail(`the job is ${shown} already; it must still be RUNNING its second cycle when the page opens`);
  }
  ok(`the job's link opens #/jobs/${s.job} from the keyboard, state RUNNING`);
  // The job was submitted with a run_timeout_ms: the page says when it would be stopped.
  await textContains(page.locator('.job-header .facts'), 'Time limit', 'the job\'s facts');
  ok('the job page shows its time limit');
}

/** The `node_lost` row: returns the lost attempt's actor and node. */
async function checkLedger(page) {
  const row = await visible(page.locator('#ledger tbody tr[data-cause="node_lost"]'), 'a node_lost row in the ledger');
  const text = await row.innerText();
  if (!/\bnode_lost\b/.test(text)) fail(`the node_lost row does not say node_lost: "${text}"`);
  if (!/\bsystem\b/.test(text)) fail(`the node_lost row does not say the system budget was charged: "${text}"`);
  const actor = await row.getAttribute('data-actor');
  const attempt = await row.getAttribute('data-attempt');
  if (attempt !== '1') fail(`the node_lost row is attempt ${attempt} of ${actor}, expected attempt 1`);
  const node = (await row.locator('td').nth(2).innerText()).trim();
  ok(`the ledger shows ${actor} attempt 1 on ${node}: node_lost, charged to system ("${text.replace(/\s+/g, ' ').trim()}")`);
  return { actor, node };
}

/** Every attempt's output is a link away: a running one's lines, read on as it writes; and a
 * lost machine's log, which the page says is out of reach. */
async function checkLogs(page, problems) {
  const running = page.locator('#actors tbody tr').filter({ hasText: 'RUNNING' }).first();
  const name = (await running.locator('th').innerText()).trim();
  await running.getByRole('link', { name: /^Output of / }).click();
  await visible(page.getByRole('heading', { level: 1, name: new RegExp(`^Output of ${name} attempt \\d+$`) }), 'the log page');
  await textContains(page.locator('#log'), 'in cycle 2', `${name}'s log`);
  const state = await page.locator('[data-log-state]').getAttribute('data-log-state');
  if (state !== 'running') fail(`the log page says ${name}'s attempt is ${state}; it runs`);
  ok(`a running actor's log link opens its output ("${(await page.locator('#log').innerText()).split('\n')[0]}…")`);
  await checkLogReadsOn(page, name);
  await page.goBack();
  await visible(page.locator('#ledger'), 'the job page again after a log');
  problems.expect404 = true;
  await page.locator('#ledger tbody tr[data-cause="node_lost"]').getByRole('link', { name: /^Output of / }).click();
  await textContains(page.locator('#view [role="alert"]'), 'stays on that machine', 'the log page of an attempt on a lost machine');
  problems.expect404 = false;
  ok('the lost attempt\'s log page says its log stays on the lost machine');
  await page.goBack();
  await visible(page.locator('#ledger'), 'the job page again after a log');
}

/** The number of the last `tick N` line the log box shows (the job writes one every 0.5 s). */
async function lastTick(page) {
  return page.evaluate(() => Number((document.querySelector('pre#log')?.textContent.match(/tick (\d+)\n?$/) || [0, 0])[1]));
}

/** Waits until the log box shows a tick after `tick`; says what it shows at the end. */
async function tickAfter(page, tick, what) {
  try {
    await page.waitForFunction((before) => {
      const found = document.querySelector('pre#log')?.textContent.match(/tick (\d+)\n?$/);
      return found && Number(found[1]) > before;
    }, tick, { timeout: STEP_TIMEOUT_MS });
  } catch {
    fail(`${what}: no line after "tick ${tick}" within ${STEP_TIMEOUT_MS / 1000} s (last: tick ${await lastTick(page)})`);
  }
  return page.evaluate(() => {
    const box = document.querySelector('pre#log');
    return { top: box.scrollTop, atEnd: box.scrollTop + box.clientHeight >= box.scrollHeight - 2, scrolls: box.scrollHeight > box.clientHeight };
  });
}

/**
 * A running attempt's page reads on from where its last read ended (`offset=`, not the whole
 * tail again), keeps its box at the end while the reader is there, and leaves it where the
 * reader scrolled to otherwise.
 */
async function checkLogReadsOn(page, name) {
  const readOn = page.waitForRequest((r) => /\/logs\?.*offset=\d+/.test(r.url()), { timeout: STEP_TIMEOUT_MS })
    .catch(() => fail(`${name}'s log page did not read on from an offset within ${STEP_TIMEOUT_MS / 1000} s`));
  const first = await tickAfter(page, 0, `${name}'s log page`);
  await readOn;
  if (!first.scrolls) fail(`${name}'s log does not fill its box (100 lines and more): nothing to check the scrolling with`);
  const atEnd = await tickAfter(page, await lastTick(page), `${name}'s log page reading on`);
  if (!atEnd.atEnd) fail(`${name}'s log box left its end when new lines came (scrolled to ${atEnd.top})`);
  await page.evaluate(() => { document.querySelector('pre#log').scrollTop = 0; });
  const kept = await tickAfter(page, await lastTick(page), `${name}'s log page reading on`);
  if (kept.top !== 0) fail(`${name}'s log box moved to ${kept.top} when new lines came; the reader had scrolled to its top`);
  const text = await page.locator('#log').textContent();
  if (!text.startsWith('rank ') || !text.includes('warm-up line 100\ntick 1\n')) {
    fail(`${name}'s log lost or repeated lines while reading on: "${text.slice(0, 200)}…"`);
  }
  // As a terminal shows it: a colour as a styled span, a progress bar as its last drawing.
  const green = await page.evaluate(() => document.querySelector('pre#log span.ansi-fg-2')?.textContent);
  if (green !== 'coloured' || !text.includes('coloured ok\nprogress 100%\n') || /\x1b|progress 10%/.test(text)) {
    fail(`${name}'s log shows escape sequences or redrawn lines as they are (green span: ${green}): "${text.slice(0, 200)}…"`);
  }
  ok(`${name}'s log page reads on from an offset (now at tick ${await lastTick(page)}), its box at the end while the reader is, and where the reader scrolled otherwise`);
}

async function checkTimeline(page, actor) {
  await visible(page.locator('#timeline-canvas svg'), 'the timeline');
  const bars = page.locator(`#timeline-canvas g.attempt[data-actor="${actor}"]`);
  const attempts = await count(bars);
  if (attempts < 2) fail(`the timeline shows ${attempts} attempt(s) of ${actor}, expected at least 2`);
  const lost = await count(page.locator(`#timeline-canvas g.attempt[data-actor="${actor}"][data-cause="node_lost"]`));
  if (lost !== 1) fail(`the timeline has ${lost} node_lost bar(s) for ${actor}, expected 1`);
  const title = await bars.first().locator('title').textContent();
  if (!title || !title.includes(actor)) fail(`a timeline bar has no descriptive title: "${title}"`);
  const marks = await count(page.locator('#timeline-canvas g.cycle-mark'));
  const second = await count(page.locator('#timeline-canvas g.cycle-mark[data-cycle="2"]'));
  if (marks < 1 || second < 1) fail(`the timeline marks ${marks} cycle start(s), none for cycle 2`);
  // A label cut at the image's edge would name another cycle ("cycle 1" of "cycle 11").
  const cut = await page.evaluate(() => {
    const svg = document.querySelector('#timeline-canvas svg');
    const edge = svg.getBoundingClientRect().right;
    return [...svg.querySelectorAll('g.cycle-mark text')]
      .filter((label) => label.getBoundingClientRect().right > edge + 0.5).map((label) => label.textContent);
  });
  if (cut.length) fail(`cycle labels cut at the timeline's right edge: ${cut.join(', ')}`);
  await textContains(page.locator('#timeline-legend'), 'node_lost', 'the timeline legend');
  // The job's hot spare, refilled after the promotion, waits with its bundle: a bar from then.
  const standby = page.locator('#timeline-canvas g.attempt[data-cause="standby"]');
  if (await count(standby) !== 1) fail(`the timeline has ${await count(standby)} standby bar(s), expected 1`);
  const waits = await standby.locator('title').textContent();
  if (!waits || !waits.includes('hot spare standing by on')) fail(`the standby bar's title says "${waits}"`);
  await textContains(page.locator('#timeline-legend'), 'standby', 'the timeline legend');
  ok(`the timeline shows ${attempts} bars of ${actor} (one node_lost), a standby spare ("${waits}"), ${marks} cycle marks incl. cycle 2, and a legend`);
}

async function checkNodes(page, lostNode, portlessNode) {
  await page.getByRole('link', { name: 'Nodes', exact: true }).click();
  await visible(page.getByRole('heading', { level: 1, name: 'Nodes' }), 'the nodes page');
  const row = await visible(page.locator(`#nodes tbody tr[data-node="${lostNode}"]`), `node ${lostNode} in the nodes list`);
  await textContains(row, 'DEAD', `node ${lostNode}'s row`);
  await textContains(row, 'drained by the operator', `node ${lostNode}'s row (the operator drained it once DEAD)`);
  const alive = await count(page.locator('#nodes tbody tr').filter({ hasText: 'ALIVE' }));
  if (alive < 1) fail('the nodes page shows no ALIVE node');
  ok(`the nodes page shows ${lostNode} DEAD and drained, and ${alive} ALIVE node(s) with their allocation`);
  if (portlessNode) {
    const short = await visible(page.locator(`#nodes tbody tr[data-node="${portlessNode}"]`), `node ${portlessNode} in the nodes list`);
    await textContains(short, 'no rendezvous port left', `node ${portlessNode}'s row (its machine's ports are all held)`);
    ok(`the nodes page says ${portlessNode} has no rendezvous port left`);
  }
  await page.goBack();
  await visible(page.locator('#ledger'), 'the job page again after going back');
  ok('the browser\'s back button returns to the job page');
}

async function liveStatus(page, status, what) {
  await page.waitForFunction(
    (want) => document.querySelector('#live')?.dataset.status === want,
    status,
    { timeout: STEP_TIMEOUT_MS, polling: 100 },
  ).catch(() => fail(`${what}: the live indicator never said ${status}`));
}

// A stopped head keeps its connections open and sends nothing, not even its keep-alive line:
// the page must say it is reconnecting, not Live, and follow again once the head resumes.
async function checkSilentHead(page, s) {
  await liveStatus(page, 'live', 'before the head stops');
  process.kill(s.headPid, 'SIGSTOP');
  try {
    // Reconnecting, counting the seconds down where screen readers do not read them out.
    await page.waitForFunction(
      () => document.querySelector('#live')?.dataset.status === 'reconnecting'
        && /Reconnecting in \d+ s$/.test(document.querySelector('#live-text')?.textContent || '')
        && document.querySelector('#live-text [data-countdown]')?.getAttribute('aria-hidden') === 'true',
      null,
      { timeout: STEP_TIMEOUT_MS, polling: 100 },
    ).catch(() => fail('while the head is stopped: the live indicator never said "Reconnecting in N s"'));
    // What the page shows is then as last heard, and it says since when.
    await textContains(page.locator('#live-text'), 'Not live since', 'the live indicator while the head is stopped');
  } finally {
    process.kill(s.headPid, 'SIGCONT');
  }
  ok('a stopped head is noticed: the page says it is reconnecting, and since when it is not live');
  await liveStatus(page, 'live', 'once the head resumes');
  ok('the page follows again once the head resumes');
}

async function waitForTheEnd(page, s) {
  // A value only this page load holds: a reload would lose it.
  await page.evaluate(() => { window.ftdriveTestMarker = 'still the same page'; });
  // A keyboard user's place: a link with no key of its own, kept through the live updates.
  await page.locator('nav.breadcrumb a').first().focus();
  const started = Date.now();
  await page.waitForFunction(
    () => document.querySelector('[data-job-state]')?.textContent.trim() === 'SUCCEEDED',
    null,
    { timeout: s.endWaitMs, polling: 200 },
  ).catch(async () => {
    const shown = await page.locator('[data-job-state]').first().textContent().catch(() => '?');
    fail(`the page still shows ${shown} after ${s.endWaitMs / 1000} s; expected SUCCEEDED`);
  });
  const marker = await page.evaluate(() => window.ftdriveTestMarker);
  if (marker !== 'still the same page') fail('the page reloaded; the update must come live');
  ok(`the page shows SUCCEEDED ${((Date.now() - started) / 1000).toFixed(1)} s later, without a reload`);
  const focused = await page.evaluate(() => {
    const active = document.activeElement;
    return active?.closest('nav.breadcrumb') ? active.textContent.trim() : active?.tagName;
  });
  if (focused !== 'Jobs') fail(`keyboard focus left the breadcrumb's Jobs link on the live update (now on ${focused})`);
  ok('keyboard focus stays on the link it was on through the live updates');
  await textContains(page.locator('#announce'), 'SUCCEEDED', 'the aria-live announcement');
  ok('the state change is announced in the aria-live region');
  const completed = await count(page.locator('#ledger tbody tr[data-cause="completed"]'));
  if (completed < 1) fail('the ledger shows no completed attempt after the job succeeded');
  ok(`the ledger shows ${completed} completed attempt(s)`);
}

async function run(s) {
  const profile = mkdtempSync(path.join(tmpdir(), 'ftdrive-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: s.chromium,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1366, height: 768 },
  });
  try {
    const page = context.pages()[0] || await context.newPage();
    const problems = watchForErrors(page);
    await signIn(page, s, problems);
    if (s.waitingJob) await checkWaitingJob(page, s);
    await checkMalformedLink(page, problems);
    if (s.waitingJob) await checkPages(page, s);
    await openJob(page, s);
    const { actor, node } = await checkLedger(page);
    await checkLogs(page, problems);
    await checkTimeline(page, actor);
    await page.screenshot({ path: s.screenshot, fullPage: true });
    ok(`saved a full-page screenshot to ${s.screenshot}`);
    await checkNodes(page, node, s.portlessNode);
    if (s.headPid) await checkSilentHead(page, s);
    await waitForTheEnd(page, s);
    const final = s.screenshot.replace(/(\.png)?$/i, '-succeeded.png');
    await page.screenshot({ path: final, fullPage: true });
    ok(`saved the ended job's page to ${final}`);
    if (problems.length) fail(`the page reported errors:\n  ${problems.join('\n  ')}`);
    ok('no console errors, uncaught exceptions or CSP violations');
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

try {
  const s = settings();
  console.log(`dashboard test: ${s.url}, job ${s.job}, browser ${s.chromium}`);
  await run(s);
  console.log('dashboard test passed');
} catch (error) {
  console.error(`FAIL: ${error instanceof CheckFailed ? error.message : error.stack || error}`);
  process.exit(1);
}
