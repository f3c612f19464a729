// The dashboard's behaviour (DESIGN §12): the token prompt, the hash router, the pages (jobs,
// one job with its actors, ledger and attempt timeline, nodes) and the live follower of the
// head's event stream. Everything shown comes from the same JSON API the CLI uses; the page
// builds its DOM with textContent only (job names and evidence are user data, never markup)
// and sets no inline styles in markup, as the head's Content-Security-Policy requires.
'use strict';

// ---------------------------------------------------------------------------------------------
// Vocabulary

const TOKEN_KEY = 'ftdrive.token';
const TERMINAL_JOB_STATES = new Set(['SUCCEEDED', 'FAILED', 'STOPPED']);

/** How an attempt ended (DESIGN §6), in legend order, with what it means for the budgets. */
const CAUSES = {
  running: 'still running',
  standby: 'hot spare, waiting',
  completed: 'exited 0',
  user_error: 'exited ≠ 0 or killed; user budget',
  node_lost: 'node or agent lost, or the node could not start it; system budget, once per fault',
  preempted: 'node preempted; preemption budget, once per fault',
  collateral: 'stopped with its gang, or a reaction to a peer\'s loss; free',
  membership_change: 'stopped for a scale-up; free',
  stopped: 'stopped by the user',
  non_retryable: 'non-retryable exit code; job failed',
  spawn_failed: 'the program could not start; job failed',
};

const SVG_NS = 'http://www.w3.org/2000/svg';

/** Every page's h1: focused on navigation, and focus stays on it across reloads. */
const HEADING = { tabindex: '-1', dataset: { focusKey: 'heading' } };

// ---------------------------------------------------------------------------------------------
// State

const app = {
  token: sessionStorage.getItem(TOKEN_KEY),
  route: { page: 'jobs' },
  data: null, // what the current page shows, as loaded
  dataKey: '', // its JSON, to skip re-rendering when nothing changed
  error: null, // the last load failure, shown above stale data
  knownJobStates: new Map(), // job id → state, to announce changes
  clockSkewMs: 0, // head clock − browser clock, when they differ by more than 2 s
  stream: null, // AbortController of the event follower
  refreshTimer: null,
  countdown: null, // the interval that counts down to the next reconnect
  refreshing: false,
  refreshAgain: false,
  logPoll: null, // the timer that reads a running attempt's log again
};

// ---------------------------------------------------------------------------------------------
// DOM helpers

/** An HTML element: `el('a', {href: '#/', class: 'x'}, 'text', child)`. */
function el(tag, props = {}, ...children) {
  return build(document.createElement(tag), props, children);
}

/** An SVG element, same calling convention as `el`. */
function svgEl(tag, props = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), props, children);
}

function build(node, props, children) {
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.setAttribute('class', value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const $ = (id) => document.getElementById(id);

/** Says `text` to screen readers (the polite live region), once per change. */
function announce(text) {
  const region = $('announce');
  region.textContent = '';
  requestAnimationFrame(() => { region.textContent = text; });
}

// ---------------------------------------------------------------------------------------------
// Formatting

const clockFormat = new Intl.DateTimeFormat(undefined, {
  hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
});
const hourMinuteFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
const dateTimeFormat = new Intl.DateTimeFormat(undefined, {
  month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
});

/** A time of day; the date too when it is not today. */
function formatTime(ms) {
  if (ms === null || ms === undefined) return '—';
  const sameDay = new Date(ms).toDateString() === new Date(serverNow()).toDateString();
  return (sameDay ? clockFormat : dateTimeFormat).format(ms);
}

function formatDuration(ms) {
  if (ms < 0 || !Number.isFinite(ms)) return '—';
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} m ${String(Math.floor(seconds % 60)).padStart(2, '0')} s`;
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, '0')} m`;
}

/** A budget's remaining count; -1 means unlimited. */
function budgetValue(n) {
  if (n === null || n === undefined) return '—';
  return n < 0 ? el('abbr', { class: 'unlimited', title: 'unlimited' }, '∞') : String(n);
}

function exitText(entry) {
  if (entry.signal !== null && entry.signal !== undefined) return `signal ${entry.signal}`;
  if (entry.exit_code !== null && entry.exit_code !== undefined) return `code ${entry.exit_code}`;
  return '—';
}

/** The index in `j1/12`, for ordering actors numerically. */
function actorIndex(name) {
  const n = Number(String(name).split('/').pop());
  return Number.isFinite(n) ? n : 0;
}

function stateBadge(value, extra = {}) {
  return el('span', { class: `badge state-${value}`, ...extra }, value);
}

function causeBadge(cause) {
  return el('span', { class: `cause-tag cause-${cause}`, title: CAUSES[cause] || cause },
    el('span', { class: 'swatch', 'aria-hidden': 'true' }), cause);
}

// ---------------------------------------------------------------------------------------------
// The API

class Unauthorized extends Error {}

function authHeaders() {
  return { Authorization: `Bearer ${app.token}` };
}

/** GET or POST a /v1 route; throws `Unauthorized` on 401, an Error with the head's message otherwise. */
async function api(path, options = {}) {
  return (await answer(path, options)).json();
}

/** A listing of jobs and where the page of older ones ends, if the limit left any out. */
async function jobsPage(path) {
  const response = await answer(path);
  return { jobs: await response.json(), older: response.headers.get('x-ftdrive-next-before') };
}

async function answer(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { ...authHeaders(), ...(options.headers || {}) },
    cache: 'no-store',
  });
  noteServerClock(response);
  if (response.status === 401) throw new Unauthorized(await errorText(response));
  if (!response.ok) throw new Error(await errorText(response));
  return response;
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (body && body.error) return body.error;
  } catch { /* not JSON: fall through */ }
  return `${response.status} ${response.statusText}`.trim();
}

/** Running attempts extend to the head's "now", which may differ from this browser's clock. */
function noteServerClock(response) {
  const date = Date.parse(response.headers.get('date') || '');
  if (Number.isNaN(date)) return;
  const skew = date - Date.now();
  app.clockSkewMs = Math.abs(skew) > 2000 ? skew : 0;
}

function serverNow() {
  return Date.now() + app.clockSkewMs;
}

// ---------------------------------------------------------------------------------------------
// Token prompt

function showLogin(message) {
  stopFollowing();
  $('login').hidden = false;
  $('view').replaceChildren();
  $('topnav').hidden = true;
  $('forget').hidden = true;
  $('live').hidden = true;
  const input = $('token');
  $('login-error').textContent = message || '';
  input.setAttribute('aria-invalid', message ? 'true' : 'false');
  document.title = 'Sign in · ftdrive';
  input.focus();
}

async function submitLogin(event) {
  event.preventDefault();
  const input = $('token');
  const token = input.value.trim();
  if (!token) {
    showLogin('Enter the API token.');
    return;
  }
  app.token = token;
  try {
    await api('/v1/health');
  } catch (error) {
    app.token = null;
    showLogin(error instanceof Unauthorized
      ? 'The head refused this token (401). Copy it again from <state-dir>/token.'
      : `Could not reach the head: ${error.message}`);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  input.value = '';
  enterDashboard();
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  app.token = null;
  app.data = null;
  app.dataKey = '';
  showLogin('');
  announce('Token forgotten.');
}

/** The saved token stopped working (a new head, a new token file). */
function tokenRefused() {
  sessionStorage.removeItem(TOKEN_KEY);
  app.token = null;
  showLogin('The head refused the saved token (401). Enter the current one.');
}

function enterDashboard() {
  $('login').hidden = true;
  $('login-error').textContent = '';
  $('topnav').hidden = false;
  $('forget').hidden = false;
  $('live').hidden = false;
  follow();
  navigate();
}

// ---------------------------------------------------------------------------------------------
// Routing: #/jobs, #/jobs/{id}, #/nodes

function parseRoute(hash) {
  const [path, query] = hash.replace(/^#\/?/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeSegment);
  // `#/jobs/j1/logs/0/2`: actor 0's attempt 2's output.
  const number = (part) => (/^[0-9]+$/.test(part || '') ? Number(part) : -1);
  const [actor, attempt] = [number(parts[3]), number(parts[4])];
  if (parts[0] === 'jobs' && parts[1] && parts[2] === 'logs' && parts.length === 5 && actor >= 0 && attempt >= 1) {
    return { page: 'log', id: parts[1], actor, attempt };
  }
  if (parts[0] === 'jobs' && parts[1]) return { page: 'job', id: parts[1] };
  if (parts[0] === 'nodes') return { page: 'nodes' };
  // `#/jobs?before=j40`: the jobs submitted before j40 (a page of older ones); `limit=N` too.
  const params = new URLSearchParams(query || '');
  const limit = Number(params.get('limit'));
  return {
    page: 'jobs',
    before: /^j[1-9][0-9]*$/.test(params.get('before') || '') ? params.get('before') : null,
    limit: Number.isInteger(limit) && limit >= 1 && limit <= JOBS_SHOWN ? limit : JOBS_SHOWN,
  };
}

function jobsHref(before, limit) {
  const params = new URLSearchParams();
  if (before) params.set('before', before);
  if (limit !== JOBS_SHOWN) params.set('limit', String(limit));
  const query = params.toString();
  return query ? `#/jobs?${query}` : '#/jobs';
}

/** A segment of a link as typed or pasted: malformed escapes are kept as they are, not thrown. */
function decodeSegment(segment) {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

function jobHref(id) {
  return `#/jobs/${encodeURIComponent(id)}`;
}

function logHref(job, actor, attempt) {
  return `${jobHref(job)}/logs/${actor}/${attempt}`;
}

/** Shows the page the URL names, moving focus to its heading (as a page load would). */
function navigate() {
  app.route = parseRoute(location.hash);
  app.data = null;
  app.dataKey = '';
  app.error = null;
  markCurrentSection();
  render({ moveFocus: true });
  refreshNow();
}

function markCurrentSection() {
  const section = app.route.page === 'nodes' ? 'nodes' : 'jobs';
  for (const link of document.querySelectorAll('#topnav a')) {
    if (link.dataset.section === section) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

// ---------------------------------------------------------------------------------------------
// Loading and rendering the current page

// A log page shows an attempt's last this many lines (`ftdrive logs` prints all of it), and
// every LOG_POLL_MS while the attempt runs reads what it wrote since (its output comes with no
// event), as `ftdrive logs --follow` does. A read of LOG_RESYNC_BYTES or more means the job
// writes faster than the page reads on: the next read is a tail again, not the backlog.
const LOG_TAIL_LINES = 500;
const LOG_POLL_MS = 2000;
const LOG_RESYNC_BYTES = 256 * 1024;

// The jobs page lists the newest this many: it reloads on every (coalesced) event, and the
// whole list of a head keeping a thousand finished jobs was a megabyte each time.
const JOBS_SHOWN = 200;

const PAGES = {
  jobs: {
    title: () => 'Jobs',
    load: async (route) => {
      const before = route.before ? `&before=${route.before}` : '';
      const [page, health] = await Promise.all([jobsPage(`/v1/jobs?limit=${route.limit}${before}`), api('/v1/health')]);
      return { jobs: page.jobs, older: page.older, health };
    },
    render: renderJobsPage,
  },
  job: {
    title: (route) => `Job ${route.id}`,
    load: async (route) => ({ job: await api(`/v1/jobs/${encodeURIComponent(route.id)}`) }),
    render: renderJobPage,
  },
  log: {
    title: (route) => `Output of ${route.id}/${route.actor} attempt ${route.attempt}`,
    load: async (route) => {
      // Reading on from where this page's last read ended, unless that read was a backlog.
      const before = app.data?.route === route && !app.data.resync ? app.data : null;
      const from = before ? `offset=${before.nextOffset}` : `tail=${LOG_TAIL_LINES}`;
      const query = `actor=${route.actor}&attempt=${route.attempt}&${from}`;
      const response = await answer(`/v1/jobs/${encodeURIComponent(route.id)}/logs?${query}`);
      const bytes = await response.arrayBuffer();
      // One decoder per page: a character split between two reads is decoded whole.
      const decoder = before ? before.decoder : new TextDecoder();
      const read = decoder.decode(bytes, { stream: true });
      // Number(null) is 0, which would read the log again from its start.
      const next = Number(response.headers.get('x-ftdrive-next-offset') ?? NaN);
      return {
        route,
        text: lastLines(before ? before.text + read : read, LOG_TAIL_LINES),
        nextOffset: Number.isSafeInteger(next) ? next : (before ? before.nextOffset : 0) + bytes.byteLength,
        resync: before !== null && bytes.byteLength >= LOG_RESYNC_BYTES,
        decoder,
        node: response.headers.get('x-ftdrive-node') || '',
        running: response.headers.get('x-ftdrive-running') === 'true',
      };
    },
    render: renderLogPage,
  },
  nodes: {
    title: () => 'Nodes',
    load: async () => {
      // Only jobs that have not ended hold nodes.
      const [nodes, jobs] = await Promise.all([api('/v1/nodes'), api('/v1/jobs?state=PENDING,RUNNING')]);
      return { nodes, jobs };
    },
    render: renderNodesPage,
  },
};

/** Coalesces bursts of events into one reload, never two at once. */
function scheduleRefresh(delay = 150) {
  if (app.refreshTimer !== null) return;
  app.refreshTimer = setTimeout(() => {
    app.refreshTimer = null;
    refreshNow();
  }, delay);
}

async function refreshNow() {
  if (app.refreshing) {
    app.refreshAgain = true;
    return;
  }
  app.refreshing = true;
  try {
    await loadCurrentPage();
  } finally {
    app.refreshing = false;
    if (app.refreshAgain) {
      app.refreshAgain = false;
      scheduleRefresh(0);
    }
  }
}

async function loadCurrentPage() {
  if (!app.token) return;
  const route = app.route;
  let data;
  try {
    data = await PAGES[route.page].load(route);
  } catch (error) {
    if (error instanceof Unauthorized) {
      tokenRefused();
      return;
    }
    if (route !== app.route || !app.token) return;
    app.error = error.message;
    render({ moveFocus: false });
    return;
  }
  if (route !== app.route || !app.token) return; // the user went elsewhere, or forgot the token, meanwhile
  pollRunningLog(data);
  const key = JSON.stringify(data);
  const hadError = app.error !== null;
  app.error = null;
  noteJobStates(data);
  if (key === app.dataKey && !hadError) return; // nothing new: keep selection and focus
  app.data = data;
  app.dataKey = key;
  render({ moveFocus: false });
}

/** A running attempt's log grows without an event: it is read again while its page is shown. */
function pollRunningLog(data) {
  clearTimeout(app.logPoll);
  app.logPoll = null;
  if (app.route.page === 'log' && data.running) app.logPoll = setTimeout(() => scheduleRefresh(0), LOG_POLL_MS);
}

/** Announces job state changes seen since the last load (not the first sighting). */
function noteJobStates(data) {
  const jobs = data.jobs || (data.job ? [data.job] : []);
  for (const job of jobs) {
    const before = app.knownJobStates.get(job.id);
    if (before && before !== job.state) announce(`Job ${job.id} (${job.name}) is now ${job.state}.`);
    app.knownJobStates.set(job.id, job.state);
  }
}

/**
 * Where the log's box was scrolled, to put the new one there after a render: at its end if it
 * was at its end (or is new: a log is read from its end, as `tail -f`), so that what the job
 * writes stays in sight; where the reader left it otherwise.
 */
function logScrollSpot() {
  const box = document.querySelector('pre#log');
  const atEnd = !box || box.scrollTop + box.clientHeight >= box.scrollHeight - 2;
  const top = box ? box.scrollTop : 0;
  return () => {
    const now = document.querySelector('pre#log');
    if (now) now.scrollTop = atEnd ? now.scrollHeight : top;
  };
}

/** Replaces the page's content, keeping keyboard focus where it was (or moving it to the new heading). */
function render({ moveFocus }) {
  const view = $('view');
  const page = PAGES[app.route.page];
  const refocus = focusedSpot(view);
  const logScroll = logScrollSpot();
  document.title = `${page.title(app.route)} · ftdrive`;
  const content = app.data
    ? page.render(app.data)
    : pagePlaceholder(page.title(app.route));
  view.replaceChildren(...(app.error && app.data ? [errorBanner(app.error)] : []), content);
  logScroll();
  // A reload keeps focus where it was without scrolling to it: the reader may have scrolled away.
  if (moveFocus) {
    view.querySelector('h1')?.focus();
  } else if (refocus) {
    refocus(view)?.focus({ preventScroll: true });
  }
  if (app.route.page === 'job') drawTimeline();
}

/**
 * Where keyboard focus is in `view`, as a way to find the same control once the view is
 * rebuilt: by its `data-focus-key` where it has one; else the same kind of element with the
 * same link target (its text may change: "3 of 5 nodes alive"), or a button with the same
 * text, the n-th of its like. Null when focus is not in the view.
 */
function focusedSpot(view) {
  const active = document.activeElement;
  if (!active || active === view || !view.contains(active)) return null;
  const keyed = active.closest('[data-focus-key]');
  if (keyed) {
    const selector = `[data-focus-key="${CSS.escape(keyed.dataset.focusKey)}"]`;
    return (rebuilt) => rebuilt.querySelector(selector);
  }
  const href = active.getAttribute('href');
  const text = active.textContent;
  const alike = (candidate) => candidate.tagName === active.tagName &&
    (href !== null ? candidate.getAttribute('href') === href : candidate.textContent === text);
  const nth = [...view.querySelectorAll(active.tagName)].filter(alike).indexOf(active);
  return (rebuilt) => [...rebuilt.querySelectorAll(active.tagName)].filter(alike)[nth];
}

/** Before the first load of a page: "Loading…", or why it could not be loaded. */
function pagePlaceholder(title) {
  return el('div', { class: 'page' },
    el('h1', HEADING, title),
    app.error
      ? [errorBanner(app.error), el('p', {}, el('a', { href: '#/jobs' }, 'Back to the jobs list'))]
      : el('p', { class: 'muted' }, 'Loading…'));
}

function errorBanner(message) {
  return el('div', { class: 'callout callout-error', role: 'alert' },
    el('strong', {}, 'Could not load this page: '), message,
    app.data ? ' (showing what was loaded before)' : '');
}

// ---------------------------------------------------------------------------------------------
// Jobs page

function renderJobsPage({ jobs, older, health }) {
  const sorted = [...jobs].sort((a, b) => b.submit_ms - a.submit_ms || b.id.localeCompare(a.id, undefined, { numeric: true }));
  const { before } = app.route;
  const empty = before
    ? el('p', { class: 'empty' }, `No jobs submitted before ${before}.`)
    : el('p', { class: 'empty' }, 'No jobs yet. Submit one with ', el('code', {}, 'ftdrive submit job.json'), '.');
  return el('div', { class: 'page' },
    el('h1', HEADING, before ? `Jobs submitted before ${before}` : 'Jobs'),
    clusterSummary(health, jobs),
    sorted.length === 0 ? empty : jobsTable(sorted),
    pageLinks(older));
}

/** Links to the newest jobs (on a page of older ones) and to the next page of older ones. */
function pageLinks(older) {
  const { before, limit } = app.route;
  if (!before && !older) return null;
  return el('nav', { class: 'pages', 'aria-label': 'Pages of jobs' },
    before ? el('a', { href: jobsHref(null, limit), id: 'newest-jobs' }, '← Newest jobs') : null,
    older ? el('a', { href: jobsHref(older, limit), id: 'older-jobs' }, `Older jobs (before ${older}) →`) : null);
}

function clusterSummary(health, jobs) {
  const active = jobs.filter((j) => !TERMINAL_JOB_STATES.has(j.state)).length;
  const shown = app.route.before
    ? ` · ${health.jobs} jobs; ${jobs.length} shown here, ${active} of them active`
    : health.jobs > jobs.length
      ? ` · ${health.jobs} jobs; the newest ${jobs.length} shown, ${active} of them active`
      : ` · ${jobs.length} job${jobs.length === 1 ? '' : 's'}, ${active} active`;
  return el('div', {},
    health.recovering
      ? el('p', { class: 'callout callout-warn' },
        'The head restarted and is waiting for its nodes to report back; states may lag for a moment.')
      : null,
    el('p', { class: 'summary' }, el('a', { href: '#/nodes' }, `${health.alive_nodes} of ${health.nodes} nodes alive`), shown));
}

function jobsTable(jobs) {
  return el('div', { class: 'table-wrap' },
    el('table', { class: 'data', id: 'jobs' },
      el('caption', { class: 'visually-hidden' }, 'Jobs, newest first'),
      el('thead', {}, el('tr', {},
        ['Job', 'Name', 'State', 'Priority', 'Cycles', 'Running actors', 'Submitted', 'Message']
          .map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, jobs.map(jobRow))));
}

function jobRow(job) {
  const running = job.actors.filter((a) => a.state === 'RUNNING').length;
  const spares = job.actors.filter((a) => a.role === 'spare').length;
  const world = job.actors.length - spares;
  return el('tr', { dataset: { job: job.id } },
    el('th', { scope: 'row' },
      el('a', { href: jobHref(job.id), dataset: { focusKey: `job-${job.id}` } }, job.id)),
    el('td', {}, job.name),
    el('td', {}, stateBadge(job.state)),
    el('td', { class: 'num' }, job.priority ?? 0),
    el('td', { class: 'num' }, job.cycles),
    el('td', { class: 'num' }, `${running} of ${world}${spares ? ` + ${spares} spare${spares === 1 ? '' : 's'}` : ''}`),
    el('td', {}, formatTime(job.submit_ms)),
    el('td', { class: 'message' }, jobMessage(job) || backoffNote(job) || job.infeasible || job.waiting || ''));
}

/** How the job ended; while it ends (its outcome decided, its processes inside their stop grace), why. */
function jobMessage(job) {
  if (!job.message || TERMINAL_JOB_STATES.has(job.state)) return job.message;
  return `ending (${job.message}): its processes are stopping`;
}

/** The soonest restart the job backs off before (`retries.backoff_ms`): the next cycle's, or an
 * actor's (restart "actor"); null once that time has gone by on the head's clock (as far as the
 * page can tell it). Said as a time of day, which a page drawn once does not make stale as a
 * countdown would. */
function backoffNote(job) {
  if (job.message || TERMINAL_JOB_STATES.has(job.state)) return null;
  const now = serverNow();
  const restarts = [[null, job.restart_at_ms], ...(job.actors || []).map((a) => [a.name, a.restart_at_ms])]
    .filter(([, at]) => at && at > now)
    .sort((x, y) => x[1] - y[1]);
  if (restarts.length === 0) return null;
  const [actor, at] = restarts[0];
  const who = actor ? `${actor} restarts` : 'restarts';
  return `${who} at ${formatTime(at)}: backing off after a failure (retries.backoff_ms)`;
}

// ---------------------------------------------------------------------------------------------
// One job's page

function renderJobPage({ job }) {
  return el('div', { class: 'page' },
    el('nav', { class: 'breadcrumb', 'aria-label': 'Breadcrumb' },
      el('a', { href: '#/jobs' }, 'Jobs'), el('span', { 'aria-hidden': 'true' }, ' / '), job.id),
    jobHeader(job),
    jobSection('timeline', 'Timeline of attempts', timelineFigure(job)),
    jobSection('actors', 'Actors', actorsTable(job)),
    jobSection('ledger', 'Ledger', ledgerTable(job)));
}

/** The last `count` lines of `text` (an unfinished last line is one of them). */
function lastLines(text, count) {
  let at = text.endsWith('\n') ? text.length - 1 : text.length;
  for (let line = 0; line < count; line++) {
    at = text.lastIndexOf('\n', at - 1);
    if (at < 0) return text;
  }
  return text.slice(at + 1);
}

/**
 * Escape sequences and control characters in a job's output: a CSI sequence (its parameters and
 * final byte: `m` is a colour), an OSC one (a window title, a clipboard), any other escape, and
 * the control characters a page has no use for (a tab and a newline are kept).
 */
const LOG_ESCAPES = /\x1b\[([0-9;:?<=>]*)[ -/]*([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -~]?|[\x00-\x08\x0b-\x1f\x7f]/g;

/** What a line redrawn with `\r` (a progress bar) shows in a terminal: its last drawing. */
function lastDrawing(line) {
  if (!line.includes('\r')) return line;
  const drawings = line.split('\r');
  for (let at = drawings.length - 1; at >= 0; at--) if (drawings[at] !== '') return drawings[at];
  return '';
}

/** Applies one SGR sequence's parameters (`1;32`) to `style`; 256-colour and true-colour ones show in no colour but the first 16. */
function applySgr(style, params) {
  const codes = params === '' ? [0] : params.split(/[;:]/).map(Number);
  for (let at = 0; at < codes.length; at++) {
    const code = codes[at];
    if (code === 0) for (const key of Object.keys(style)) delete style[key];
    else if (code >= 1 && code <= 4) style[['', 'bold', 'dim', 'italic', 'underline'][code]] = true;
    else if (code === 22) { delete style.bold; delete style.dim; }
    else if (code === 23) delete style.italic;
    else if (code === 24) delete style.underline;
    else if (code >= 30 && code <= 37) style.fg = code - 30;
    else if (code >= 90 && code <= 97) style.fg = code - 82;
    else if (code === 39) delete style.fg;
    else if (code >= 40 && code <= 47) style.bg = code - 40;
    else if (code >= 100 && code <= 107) style.bg = code - 92;
    else if (code === 49) delete style.bg;
    else if (code === 38 || code === 48) {
      const which = code === 38 ? 'fg' : 'bg';
      if (codes[at + 1] === 5 && codes[at + 2] < 16) style[which] = codes[at + 2];
      at += codes[at + 1] === 5 ? 2 : codes[at + 1] === 2 ? 4 : 1;
    }
  }
}

function sgrClass(style) {
  return [
    style.fg !== undefined && `ansi-fg-${style.fg}`, style.bg !== undefined && `ansi-bg-${style.bg}`,
    style.bold && 'ansi-bold', style.dim && 'ansi-dim', style.italic && 'ansi-italic', style.underline && 'ansi-underline',
  ].filter(Boolean).join(' ');
}

/**
 * A job's output as a terminal shows it, in nodes for its box: colours (SGR) as styled spans
 * (classes: the page sets no inline style), a progress bar's line as its last drawing, and every
 * other escape sequence and control character left out, so the reader sees text, not `[32m`.
 */
function logNodes(text) {
  const shown = text.split('\n').map(lastDrawing).join('\n');
  const nodes = [];
  const style = {};
  let from = 0;
  const add = (part) => {
    if (!part) return;
    const classes = sgrClass(style);
    nodes.push(classes ? el('span', { class: classes }, part) : part);
  };
  for (const found of shown.matchAll(LOG_ESCAPES)) {
    add(shown.slice(from, found.index));
    if (found[2] === 'm') applySgr(style, found[1]);
    from = found.index + found[0].length;
  }
  add(shown.slice(from));
  return nodes;
}

/** One attempt's output: its last LOG_TAIL_LINES lines, as `ftdrive logs --tail` prints them. */
function renderLogPage({ route, text, node, running }) {
  const { id, actor, attempt } = route;
  const all = `ftdrive logs ${id} --actor ${actor} --attempt ${attempt}`;
  return el('div', { class: 'page' },
    el('nav', { class: 'breadcrumb', 'aria-label': 'Breadcrumb' },
      el('a', { href: '#/jobs' }, 'Jobs'), el('span', { 'aria-hidden': 'true' }, ' / '),
      el('a', { href: jobHref(id) }, id), el('span', { 'aria-hidden': 'true' }, ' / '), `${id}/${actor} attempt ${attempt}`),
    el('h1', HEADING, `Output of ${id}/${actor} attempt ${attempt}`),
    el('p', { class: 'muted', dataset: { logState: running ? 'running' : 'ended' } },
      `On ${node}; `, running ? 'it runs, and this page reads on as it writes. ' : 'it has ended. ',
      `The last ${LOG_TAIL_LINES} lines at most; `, el('code', {}, all), ' prints all of it.'),
    text
      ? el('pre', { class: 'log', id: 'log', tabindex: '0', 'aria-label': `Output of ${id}/${actor} attempt ${attempt}` }, logNodes(text))
      : el('p', { class: 'empty', id: 'log' }, 'It wrote no output.'));
}

function jobSection(id, title, ...content) {
  return el('section', { class: 'panel', 'aria-labelledby': `${id}-title` },
    el('h2', { id: `${id}-title` }, title), ...content);
}

function jobHeader(job) {
  const pg = job.placement_groups?.[0];
  const remaining = job.remaining || {};
  return el('header', { class: 'job-header' },
    el('div', { class: 'job-title-row' },
      el('h1', HEADING, `Job ${job.id} `, el('span', { class: 'job-name' }, job.name)),
      stateBadge(job.state, { class: `badge badge-large state-${job.state}`, 'data-job-state': job.state }),
      TERMINAL_JOB_STATES.has(job.state) ? null : stopButton(job)),
    job.message ? el('p', { class: `callout ${job.state === 'FAILED' ? 'callout-error' : 'callout-info'}` }, jobMessage(job)) : null,
    backoffNote(job) ? el('p', { class: 'callout callout-info', dataset: { backoff: '' } }, backoffNote(job)) : null,
    job.infeasible ? el('p', { class: 'callout callout-warn' }, job.infeasible) : null,
    job.waiting && !TERMINAL_JOB_STATES.has(job.state)
      ? el('p', { class: 'callout callout-info', dataset: { waiting: '' } }, job.waiting) : null,
    el('dl', { class: 'facts' },
      fact('Cycle', job.cycles),
      fact('Nodes', job.min_nodes === job.max_nodes ? job.min_nodes : `${job.min_nodes}–${job.max_nodes}`),
      fact('Priority', job.priority ?? 0),
      fact('Submitted', formatTime(job.submit_ms)),
      job.run_deadline_ms && !job.message && !TERMINAL_JOB_STATES.has(job.state)
        ? fact('Time limit', `stopped and failed at ${formatTime(job.run_deadline_ms)} unless it ends first (run_timeout_ms)`)
        : null,
      fact('Retries left',
        el('span', {}, 'user ', budgetValue(remaining.user), ' · system ', budgetValue(remaining.system),
          ' · preemption ', budgetValue(remaining.preemption))),
      pg ? fact('Placement group', `${pg.state}, ${pg.strategy.toLowerCase().replace(/_/g, ' ')}`) : null));
}

function fact(term, value) {
  return el('div', { class: 'fact' }, el('dt', {}, term), el('dd', {}, value));
}

function stopButton(job) {
  return el('button', {
    type: 'button',
    class: 'button-danger',
    dataset: { focusKey: 'stop' },
    onclick: () => stopJob(job),
  }, 'Stop job');
}

async function stopJob(job) {
  if (!window.confirm(`Stop job ${job.id} (${job.name})? Its processes are ended.`)) return;
  try {
    await api(`/v1/jobs/${encodeURIComponent(job.id)}/stop`, { method: 'POST' });
    announce(`Stopping job ${job.id}.`);
  } catch (error) {
    if (error instanceof Unauthorized) {
      tokenRefused();
      return;
    }
    // Shown, not only announced: the job runs on, and the page must not look as if it stopped.
    const message = `Could not stop job ${job.id}: ${error.message}`;
    announce(message);
    window.alert(message);
  }
  scheduleRefresh(0);
}

function actorsTable(job) {
  const actors = [...job.actors].sort((a, b) => actorIndex(a.name) - actorIndex(b.name));
  const withDevices = actors.some((a) => Array.isArray(a.devices) && a.devices.length > 0);
  const headers = ['Actor', 'State', 'Role', 'Rank', 'Node', 'Attempt', ...(withDevices ? ['GPUs'] : []), 'Running since', 'Output'];
  return el('div', { class: 'table-wrap' },
    el('table', { class: 'data', id: 'actors' },
      el('thead', {}, el('tr', {}, headers.map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, actors.map((a) => el('tr', { dataset: { actor: a.name } },
        el('th', { scope: 'row' }, a.name),
        el('td', {}, stateBadge(a.state), a.starting
          ? el('span', { class: 'muted', title: 'its start was sent; its agent has not confirmed that its process runs' }, ' starting')
          : null),
        el('td', {}, a.role),
        el('td', { class: 'num' }, a.rank ?? '—'),
        el('td', {}, a.node ?? '—'),
        el('td', { class: 'num' }, a.attempt),
        withDevices ? el('td', {}, (a.devices || []).join(', ') || '—') : null,
        el('td', {}, a.started_ms ? formatTime(a.started_ms) : '—'),
        el('td', {}, a.attempt > 0
          ? el('a', { href: logHref(job.id, actorIndex(a.name), a.attempt), 'aria-label': `Output of ${a.name} attempt ${a.attempt}` }, 'log')
          : '—'))))));
}

function ledgerTable(job) {
  if (job.ledger.length === 0) {
    return el('p', { class: 'empty' }, 'No attempt has ended yet.');
  }
  const headers = ['Actor', 'Attempt', 'Cycle', 'Node', 'Started', 'Ran', 'Exit', 'Cause', 'Budget charged'];
  const row = (entry) => ledgerRow(job.id, entry);
  return el('div', { class: 'table-wrap' },
    el('table', { class: 'data ledger', id: 'ledger' },
      el('caption', { class: 'visually-hidden' },
        'Every ended attempt: why it ended, which retry budget it was charged to and what remained'),
      el('thead', {}, el('tr', {},
        headers.map((h) => el('th', { scope: 'col' }, h)),
        el('th', { scope: 'col' }, 'Remaining ',
          el('abbr', { title: 'user / system / preemption budgets' }, 'u / s / p')),
        el('th', { scope: 'col' }, 'Evidence'),
        el('th', { scope: 'col' }, 'Output'))),
      el('tbody', {}, job.ledger.map(row))));
}

function ledgerRow(job, entry) {
  const r = entry.remaining || {};
  return el('tr', { dataset: { actor: entry.actor, attempt: entry.attempt, cause: entry.cause, budget: entry.budget } },
    el('th', { scope: 'row' }, entry.actor, entry.rank !== null && entry.rank !== undefined
      ? el('span', { class: 'muted' }, ` rank ${entry.rank}`) : null),
    el('td', { class: 'num' }, entry.attempt),
    el('td', { class: 'num' }, entry.cycle),
    el('td', {}, entry.node),
    el('td', {}, formatTime(entry.start_ms)),
    el('td', { class: 'num' }, formatDuration(entry.end_ms - entry.start_ms)),
    el('td', {}, exitText(entry)),
    el('td', {}, causeBadge(entry.cause)),
    el('td', {}, el('span', { class: `budget budget-${entry.budget}` }, entry.budget)),
    el('td', { class: 'num remaining' },
      budgetValue(r.user), ' / ', budgetValue(r.system), ' / ', budgetValue(r.preemption)),
    el('td', { class: 'evidence' }, entry.evidence),
    el('td', {}, el('a', {
      href: logHref(job, actorIndex(entry.actor), entry.attempt),
      'aria-label': `Output of ${entry.actor} attempt ${entry.attempt}`,
    }, 'log')));
}

// ---------------------------------------------------------------------------------------------
// The attempt timeline: one row per actor, one bar per attempt, coloured by cause

const TIMELINE = { labelWidth: 150, rowHeight: 30, barHeight: 20, top: 28, bottom: 26, right: 18 };
const TICK_STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

function timelineFigure(job) {
  return el('figure', { class: 'timeline' },
    el('div', { class: 'timeline-canvas', id: 'timeline-canvas' }),
    el('figcaption', {},
      el('p', { class: 'muted' },
        'One row per actor, one bar per attempt, from its start to its end (running attempts to now). ',
        'Vertical lines mark the start of each cycle. The ledger below lists the same attempts as text.'),
      el('ul', { class: 'legend', id: 'timeline-legend', 'aria-label': 'Colours by cause' })));
}

/** Every attempt of the job: ended ones from the ledger, live ones from the actors. */
function timelineAttempts(job, now) {
  const attempts = job.ledger.map((e) => ({
    actor: e.actor, attempt: e.attempt, cycle: e.cycle, node: e.node,
    start: e.start_ms, end: e.end_ms, cause: e.cause, budget: e.budget, live: false,
  }));
  const ended = new Set(attempts.map((a) => `${a.actor}#${a.attempt}`));
  for (const actor of job.actors) {
    if (actor.state === 'STANDBY' && actor.started_ms == null && actor.standby_since_ms != null) {
      // A hot spare waiting with its bundle: no process runs, so no attempt; the wait is a bar.
      attempts.push({
        actor: actor.name, attempt: actor.attempt, cycle: job.cycles, node: actor.node,
        start: actor.standby_since_ms, end: Math.max(now, actor.standby_since_ms),
        cause: 'standby', budget: null, live: true,
      });
      continue;
    }
    if (actor.started_ms === null || actor.started_ms === undefined) continue;
    if (ended.has(`${actor.name}#${actor.attempt}`)) continue;
    attempts.push({
      actor: actor.name, attempt: actor.attempt, cycle: job.cycles, node: actor.node,
      start: actor.started_ms, end: Math.max(now, actor.started_ms),
      cause: actor.state === 'STANDBY' ? 'standby' : 'running', budget: null, live: true,
    });
  }
  return attempts;
}

/** (Re)draws the timeline into its canvas at the canvas's current width. */
function drawTimeline() {
  const canvas = $('timeline-canvas');
  const job = app.data?.job;
  if (!canvas || !job) return;
  const now = serverNow();
  const attempts = timelineAttempts(job, now);
  const actors = timelineRows(job, attempts);
  const width = Math.max(canvas.clientWidth, 480);
  canvas.timelineScale = null;
  canvas.replaceChildren(attempts.length
    ? timelineSvg(job, attempts, actors, width, now, canvas)
    : el('p', { class: 'empty' }, 'No attempt has started yet.'));
  drawLegend(attempts);
}

/**
 * Once a second while the job runs: running bars and the "now" mark move right, in place (a
 * bar's tooltip stays open), until "now" leaves the drawn range and the whole timeline is
 * redrawn at a new scale.
 */
function growLiveBars() {
  const canvas = $('timeline-canvas');
  const scale = canvas?.timelineScale;
  // Not live, the page does not know that they still run: they stay as last heard.
  if (!scale || $('live').dataset.status !== 'live') return;
  const now = serverNow();
  if (now > scale.t1) {
    drawTimeline();
    return;
  }
  for (const bar of canvas.querySelectorAll('g.attempt.live')) {
    const rect = bar.querySelector('rect');
    const left = Number(rect.getAttribute('x'));
    const width = Math.max(3, scale.x(now) - left);
    rect.setAttribute('width', width);
    placeBarLabel(bar, bar.attemptData, left, width, bar.roomEnd);
  }
  moveNowMark(canvas.querySelector('g.now-mark'), scale.x(now));
}

function timelineRows(job, attempts) {
  const names = new Set([...job.actors.map((a) => a.name), ...attempts.map((a) => a.actor)]);
  return [...names].sort((a, b) => actorIndex(a) - actorIndex(b));
}

function timelineRange(job, attempts, now) {
  const starts = attempts.map((a) => a.start).concat((job.cycle_starts || []).map((c) => c.at_ms));
  const ends = attempts.map((a) => a.end).concat(starts);
  const t0 = Math.min(job.submit_ms, ...starts);
  if (TERMINAL_JOB_STATES.has(job.state)) return [t0, Math.max(t0 + 1000, ...ends)];
  // Room ahead of "now", so that running bars grow for a while before the scale changes.
  const latest = Math.max(now, t0 + 1000, ...ends);
  return [t0, latest + Math.max(5000, (latest - t0) * 0.15)];
}

function timelineSvg(job, attempts, actors, width, now, canvas) {
  const T = TIMELINE;
  const height = T.top + actors.length * T.rowHeight + T.bottom;
  const [t0, t1] = timelineRange(job, attempts, now);
  const plotWidth = width - T.labelWidth - T.right;
  const x = (t) => T.labelWidth + ((t - t0) / (t1 - t0)) * plotWidth;
  const rowY = (actor) => T.top + actors.indexOf(actor) * T.rowHeight;
  const cycles = (job.cycle_starts || []).length;
  const svg = svgEl('svg', {
    width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `Timeline of ${attempts.length} attempts of ${actors.length} actors across ${cycles} cycle${cycles === 1 ? '' : 's'}`,
  });
  svg.append(
    timeAxis(t0, t1, x, height, plotWidth),
    rowLabels(job, actors, rowY),
    ...attempts.map((a) => attemptBar(a, x, rowY(a.actor), nextStartX(a, attempts, x, width))),
    cycleMarks(job.cycle_starts || [], x, width, height),
  );
  if (!TERMINAL_JOB_STATES.has(job.state)) {
    const mark = svgEl('g', { class: 'now-mark', 'aria-hidden': 'true' },
      svgEl('line', { y1: T.top - 4, y2: height - T.bottom }),
      svgEl('text', { y: T.top - 13, 'text-anchor': 'middle' }, 'now'));
    const lastCycle = (job.cycle_starts || []).at(-1);
    mark.lastCycleX = lastCycle ? x(lastCycle.at_ms) : -Infinity;
    moveNowMark(mark, x(now));
    svg.append(mark);
    canvas.timelineScale = { t0, t1, x };
  }
  return svg;
}

function moveNowMark(mark, at) {
  if (!mark) return;
  for (const line of mark.querySelectorAll('line')) {
    line.setAttribute('x1', at);
    line.setAttribute('x2', at);
  }
  const label = mark.querySelector('text');
  label.setAttribute('x', at);
  // Hidden while it would overlap the latest cycle's label.
  label.setAttribute('visibility', at - mark.lastCycleX < 80 ? 'hidden' : 'visible');
}

/** Where the next attempt of the same actor starts (or the right edge): room for a label. */
function nextStartX(attempt, attempts, x, width) {
  const later = attempts
    .filter((a) => a.actor === attempt.actor && a.start > attempt.start)
    .map((a) => x(a.start));
  return Math.min(width, ...later);
}

function timeAxis(t0, t1, x, height, plotWidth) {
  const T = TIMELINE;
  const maxTicks = Math.max(2, Math.floor(plotWidth / 90));
  const stepS = TICK_STEPS_S.find((s) => (t1 - t0) / (s * 1000) <= maxTicks) ?? TICK_STEPS_S.at(-1);
  const step = stepS * 1000;
  const label = (t) => (stepS < 60 ? clockFormat : hourMinuteFormat).format(t);
  const group = svgEl('g', { class: 'axis' });
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    group.append(
      svgEl('line', { class: 'grid', x1: x(t), x2: x(t), y1: T.top - 4, y2: height - T.bottom }),
      svgEl('text', { class: 'tick', x: x(t), y: height - 8, 'text-anchor': 'middle' }, label(t)));
  }
  group.append(svgEl('line', { class: 'baseline', x1: T.labelWidth, x2: x(t1), y1: height - T.bottom, y2: height - T.bottom }));
  return group;
}

function rowLabels(job, actors, rowY) {
  const T = TIMELINE;
  const byName = new Map(job.actors.map((a) => [a.name, a]));
  const group = svgEl('g', { class: 'row-labels' });
  for (const name of actors) {
    const actor = byName.get(name);
    const y = rowY(name) + T.rowHeight / 2;
    const detail = actor ? (actor.rank !== null && actor.rank !== undefined ? `rank ${actor.rank}` : actor.role) : '';
    group.append(svgEl('g', { class: 'row' },
      svgEl('rect', { class: 'row-band', x: 0, y: rowY(name), width: '100%', height: T.rowHeight }),
      svgEl('text', { class: 'row-name', x: 8, y, 'dominant-baseline': 'middle' }, name),
      svgEl('text', { class: 'row-detail', x: T.labelWidth - 10, y, 'dominant-baseline': 'middle', 'text-anchor': 'end' }, detail)));
  }
  return group;
}

function attemptBar(attempt, x, rowTop, roomEnd) {
  const T = TIMELINE;
  const left = x(attempt.start);
  const width = Math.max(3, x(attempt.end) - left);
  const y = rowTop + (T.rowHeight - T.barHeight) / 2;
  const charged = attempt.budget && attempt.budget !== 'none' ? `, charged to ${attempt.budget}` : '';
  const when = attempt.live
    ? `since ${formatTime(attempt.start)}`
    : `${formatTime(attempt.start)}–${formatTime(attempt.end)}, ${formatDuration(attempt.end - attempt.start)}`;
  const title = attempt.cause === 'standby'
    ? `${attempt.actor}: hot spare standing by on ${attempt.node ?? '?'} (${when})`
    : `${attempt.actor} attempt ${attempt.attempt}, cycle ${attempt.cycle}, on ${attempt.node ?? '?'}: `
      + `${attempt.cause}${charged} (${when})`;
  const group = svgEl('g', {
    class: `attempt cause-${attempt.cause}${attempt.live ? ' live' : ''}`,
    dataset: { actor: attempt.actor, attempt: attempt.attempt, cause: attempt.cause },
  },
  svgEl('title', {}, title),
  svgEl('rect', { x: left, y, width, height: T.barHeight, rx: 3 }));
  group.attemptData = attempt;
  group.roomEnd = roomEnd;
  placeBarLabel(group, attempt, left, width, roomEnd);
  return group;
}

/** The bar's label inside it, or beside it when the bar is short and the room after it is not. */
function placeBarLabel(group, attempt, left, width, roomEnd) {
  group.querySelector('text')?.remove();
  const rect = group.querySelector('rect');
  const textY = Number(rect.getAttribute('y')) + TIMELINE.barHeight / 2;
  const inside = barLabel(attempt, width - 12);
  const outside = inside.length > 3 ? '' : barLabel(attempt, roomEnd - (left + width) - 10);
  if (outside.length > inside.length) {
    group.append(svgEl('text', { class: 'outside', x: left + width + 5, y: textY, 'dominant-baseline': 'central' }, outside));
  } else if (inside) {
    group.append(svgEl('text', { x: left + 6, y: textY, 'dominant-baseline': 'central' }, inside));
  }
}

/** The longest of "#2 node_lost · n2", "#2 node_lost", "#2" that fits in `room` pixels. */
function barLabel(attempt, room) {
  const candidates = attempt.cause === 'standby' ? [`standby · ${attempt.node ?? '?'}`, 'standby'] : [
    `#${attempt.attempt} ${attempt.cause} · ${attempt.node ?? '?'}`,
    `#${attempt.attempt} ${attempt.cause}`,
    `#${attempt.attempt}`,
  ];
  return candidates.find((text) => text.length * 7 <= room) ?? '';
}

/**
 * A dashed line at each cycle start; labels where they fit whole (before the next label, or
 * the image's right edge: a label cut there, "cycle 1" of "cycle 11", would name another
 * cycle), the newest cycles first.
 */
function cycleMarks(cycleStarts, x, width, height) {
  const T = TIMELINE;
  const group = svgEl('g', { class: 'cycles' });
  let nextLabelX = width;
  for (const start of [...cycleStarts].reverse()) {
    const at = x(start.at_ms);
    const mark = svgEl('g', { class: 'cycle-mark', dataset: { cycle: start.cycle } },
      svgEl('title', {}, `cycle ${start.cycle} formed at ${formatTime(start.at_ms)}, world size ${start.world_size}`),
      svgEl('line', { x1: at, x2: at, y1: T.top - 10, y2: height - T.bottom }));
    const label = `cycle ${start.cycle}`;
    // About 7 px a character (bold 12 px), 3 px from the line and some room before the next.
    if (at + 3 + label.length * 7 + 4 <= nextLabelX) {
      mark.append(svgEl('text', { x: at + 3, y: T.top - 13 }, label));
      nextLabelX = at;
    }
    group.prepend(mark);
  }
  return group;
}

/** Legend entries for the causes the timeline shows: a swatch, the cause and what it means. */
function drawLegend(attempts) {
  const legend = $('timeline-legend');
  if (!legend) return;
  const shown = new Set(attempts.map((a) => a.cause));
  // Known causes in legend order, then any this page does not know yet (a newer head's).
  const causes = [...Object.keys(CAUSES).filter((c) => shown.has(c)), ...[...shown].filter((c) => !(c in CAUSES))];
  legend.hidden = causes.length === 0;
  legend.replaceChildren(...causes.map((cause) => el('li', {},
    el('span', { class: `swatch cause-${cause}`, 'aria-hidden': 'true' }),
    el('strong', {}, cause), ` — ${CAUSES[cause] || 'see the ledger\'s evidence'}`)));
}

// ---------------------------------------------------------------------------------------------
// Nodes page

function renderNodesPage({ nodes, jobs }) {
  const actorsByNode = new Map();
  for (const job of jobs) {
    for (const actor of job.actors) {
      if (!actor.node || TERMINAL_ACTOR_STATES.has(actor.state)) continue;
      if (!actorsByNode.has(actor.node)) actorsByNode.set(actor.node, []);
      actorsByNode.get(actor.node).push(actor);
    }
  }
  const counts = ['ALIVE', 'DRAINING', 'DEAD']
    .map((s) => [s, nodes.filter((n) => n.state === s).length])
    .filter(([, n]) => n > 0)
    .map(([s, n]) => `${n} ${s.toLowerCase()}`);
  return el('div', { class: 'page' },
    el('h1', HEADING, 'Nodes'),
    el('p', { class: 'summary' }, nodes.length ? counts.join(' · ') : ''),
    nodes.length === 0
      ? el('p', { class: 'empty' }, 'No node has registered. Start one with ',
        el('code', {}, 'ftdrive node --head URL'), '.')
      : nodesTable([...nodes].sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true })), actorsByNode));
}

const TERMINAL_ACTOR_STATES = new Set(['TASK_COMPLETED', 'FAILED', 'STOPPED']);

function nodesTable(nodes, actorsByNode) {
  return el('div', { class: 'table-wrap' },
    el('table', { class: 'data', id: 'nodes' },
      el('thead', {}, el('tr', {},
        ['Node', 'State', 'Allocated of resources', 'Actors', 'Labels', 'Address'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, nodes.map((node) => el('tr', { dataset: { node: node.name } },
        el('th', { scope: 'row' }, node.name),
        el('td', {}, stateBadge(node.state), drainNote(node)),
        el('td', {}, allocation(node)),
        el('td', {}, nodeActors(actorsByNode.get(node.name) || [])),
        el('td', {}, labels(node.labels)),
        el('td', {}, node.addr || '—'))))));
}

/** Who drained the node: its own agent (the machine is leaving) or the operator (until `ftdrive undrain`);
 * why its agent cannot start work, if it cannot (it is given nothing new meanwhile); and whether it has
 * no rendezvous port left (PS-2), which leaves it empty however free its resources. */
function drainNote(node) {
  const by = [];
  if (node.leaving && node.state === 'DRAINING') by.push('machine leaving');
  if (node.cordoned) by.push('drained by the operator until undrained');
  if (node.problem) by.push(`given no new work: ${node.problem}`);
  if (node.suspect) by.push(suspectNote(node.suspect));
  if (node.ports_left === 0 && node.state !== 'DEAD') {
    by.push('no rendezvous port left: its machine\'s agents share the head\'s ports, --ports-per-node each');
  }
  return by.length === 0 ? null : el('span', { class: 'muted drain-note' }, ` ${by.join('; ')}`);
}

/** Why the head suspects the node (DESIGN §3), and when it will be declared DEAD unless heard from. */
function suspectNote(suspect) {
  const why = suspect.link_lost ? 'connection dropped' : 'no heartbeat';
  const secs = (ms) => (ms / 1000).toFixed(1);
  if (suspect.held) {
    return `suspect: ${why} for ${secs(suspect.silent_ms)} s, as from every node (the head's own network is the likelier cause); DEAD no sooner than ${secs(suspect.dead_in_ms)} s after a node is heard from`;
  }
  return `suspect: ${why} for ${secs(suspect.silent_ms)} s, DEAD in ${secs(suspect.dead_in_ms)} s unless heard from`;
}

/** "cpu 1 of 1" per resource, with a meter. */
function allocation(node) {
  const entries = Object.entries(node.resources || {});
  if (entries.length === 0) return '—';
  return el('ul', { class: 'allocation' }, entries.map(([name, total]) => {
    const used = node.allocated?.[name] ?? 0;
    return el('li', {},
      el('span', { class: 'alloc-text' }, `${name} ${used} of ${total}`),
      el('meter', { min: 0, max: total || 1, value: used, 'aria-label': `${name} allocated` }));
  }));
}

function nodeActors(actors) {
  if (actors.length === 0) return el('span', { class: 'muted' }, 'none');
  return el('ul', { class: 'inline-list' }, actors.map((a) => {
    const job = String(a.name).split('/')[0];
    return el('li', {}, el('a', { href: jobHref(job) }, a.name), ` ${a.state.toLowerCase()}`);
  }));
}

function labels(map) {
  const entries = Object.entries(map || {});
  if (entries.length === 0) return el('span', { class: 'muted' }, 'none');
  return el('ul', { class: 'chips' }, entries.map(([k, v]) => el('li', { class: 'chip' }, `${k}=${v}`)));
}

// ---------------------------------------------------------------------------------------------
// Live updates: follow /v1/events, reload what is shown on every relevant event

function follow() {
  stopFollowing();
  const controller = new AbortController();
  app.stream = controller;
  followLoop(controller.signal);
}

function stopFollowing() {
  if (app.stream) app.stream.abort();
  app.stream = null;
}

async function followLoop(signal) {
  let delay = 1000;
  while (!signal.aborted) {
    setLive('connecting');
    try {
      const response = await fetch('/v1/events', { headers: authHeaders(), signal, cache: 'no-store' });
      if (response.status === 401) {
        tokenRefused();
        return;
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      setLive('live');
      delay = 1000;
      scheduleRefresh(0); // catch up with whatever happened while disconnected
      await readLines(response.body, onEventLine, silenceLimitMs(response));
    } catch (error) {
      if (signal.aborted) return;
    }
    setLive('reconnecting', delay);
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 15000);
  }
}

// The head sends a blank line whenever the stream was quiet for the interval it names; three
// such intervals without a byte mean it is stopped or cut off (its connection stays open).
const KEEPALIVES_MISSED = 3;

function silenceLimitMs(response) {
  const interval = Number(response.headers.get('x-ftdrive-keepalive-ms'));
  return Number.isFinite(interval) && interval > 0 ? interval * KEEPALIVES_MISSED : null;
}

async function readLines(body, onLine, silenceMs) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await readWithin(reader, silenceMs);
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let newline;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      if (line) onLine(line);
    }
  }
}

// The next read, or an error once `ms` pass without one (the connection is then closed).
function readWithin(reader, ms) {
  if (ms === null) return reader.read();
  let timer;
  const silence = new Promise((_, reject) => {
    timer = setTimeout(() => {
      reader.cancel().catch(() => {});
      reject(new Error('the head went silent'));
    }, ms);
  });
  return Promise.race([reader.read(), silence]).finally(() => clearTimeout(timer));
}

function onEventLine(line) {
  let event;
  try {
    event = JSON.parse(line);
  } catch {
    return; // a torn or foreign line: the next event reloads anyway
  }
  // A job's page only cares about its own job (and nodes, which its actors run on) — unless it
  // waits: why it waits names the other jobs that hold its nodes, which their events change.
  const waits = Boolean(app.data?.job?.waiting || app.data?.job?.infeasible);
  if (app.route.page === 'job' && event.job && event.job !== app.route.id && !waits) return;
  // A log page reads its agent's log on each reload: only its own job's events end an attempt.
  if (app.route.page === 'log' && event.job !== app.route.id) return;
  scheduleRefresh();
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/**
 * The top bar's word on the event stream. Once it is lost, it says since when what the page
 * shows has not been updated: the tables stay as they were, and would otherwise look current.
 * While it waits to reconnect, the seconds left count down — in a part screen readers skip,
 * since the indicator is a live region and would otherwise be read out every second.
 */
function setLive(status, retryMs) {
  const live = $('live');
  if (status === 'live') app.notLiveSince = null;
  else if (live.dataset.status === 'live') app.notLiveSince = Date.now();
  live.dataset.status = status;
  const since = app.notLiveSince ? `Not live since ${new Date(app.notLiveSince).toLocaleTimeString()} · ` : '';
  const text = $('live-text');
  text.textContent = {
    connecting: `${since}Connecting…`,
    live: 'Live',
    reconnecting: `${since}Reconnecting`,
  }[status];
  clearInterval(app.countdown);
  if (status !== 'reconnecting') return;
  const countdown = el('span', { 'aria-hidden': 'true', 'data-countdown': '' });
  text.append(countdown);
  const at = Date.now() + (retryMs || 0);
  const tick = () => {
    countdown.textContent = ` in ${Math.max(1, Math.ceil((at - Date.now()) / 1000))} s`;
  };
  tick();
  app.countdown = setInterval(tick, 250);
}

// ---------------------------------------------------------------------------------------------
// Start

function debounce(fn, ms) {
  let timer = null;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(fn, ms);
  };
}

function start() {
  $('login-form').addEventListener('submit', submitLogin);
  $('forget').addEventListener('click', forgetToken);
  $('skip-link').addEventListener('click', (event) => {
    event.preventDefault(); // the hash belongs to the router
    $('main').focus();
  });
  window.addEventListener('hashchange', () => { if (app.token) navigate(); });
  window.addEventListener('resize', debounce(() => { if (app.route.page === 'job') drawTimeline(); }, 150));
  // Running attempts grow with time even when no event arrives.
  setInterval(() => {
    if (app.route.page === 'job') growLiveBars();
  }, 1000);
  if (app.token) enterDashboard();
  else showLogin('');
}

start();
