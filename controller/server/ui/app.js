// The sbx serve web page: runs, their events as they stream, pending
// approvals and sandboxes. It calls the API (/v1/...) with its session
// cookie, sending X-CSRF-Token on anything but a GET; the server decides
// what a token may do, and the page only shows what its scopes allow.
// Text from the server is always set as text, never as HTML.
'use strict';

const POLL_MS = 2000;
const RECONNECT_MS = 2000;
const STATUS_TEXT = {
  queued: 'queued', running: 'running',
  waiting_approval: 'waiting for approval', completed: 'completed',
  failed: 'failed', cancelled: 'cancelled',
};
const UNFINISHED = ['queued', 'running', 'waiting_approval'];
const EVENT_TYPES = [
  'run_started', 'sandbox_created', 'text_delta', 'tool_call_started',
  'tool_call_finished', 'approval_requested', 'agent_tool_started',
  'handoff', 'turn_finished', 'run_paused', 'run_finished', 'run_failed',
  'run_cancelled',
];
const TERMINAL = ['run_finished', 'run_failed', 'run_cancelled'];
const INTERRUPTED = 'The event stream was interrupted; resuming…';

const S = {
  session: null, // {name, scopes, csrf, expires_at}
  timer: null, // the current view's poll
  view: null, // {name, refresh, close}
};

// --- small helpers ---

const $ = (id) => document.getElementById(id);

// An element TAG with ATTRS (attributes; "text" sets its text, "on*"
// handlers) and CHILDREN (nodes or strings).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) {
    if (c !== null && c !== undefined) e.append(c);
  }
  return e;
}

function can(scope) {
  const s = S.session ? S.session.scopes : [];
  return s.includes(scope) || s.includes('admin');
}

function say(text) {
  $('status').textContent = text;
}

// A time of the API (RFC 3339 text) as milliseconds.
const ms = (t) => Date.parse(t);

function age(t) {
  const s = Math.max(0, (Date.now() - ms(t)) / 1000);
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

function timeEl(t) {
  const iso = new Date(ms(t)).toISOString();
  return el('time', {datetime: iso, title: iso, text: age(t) + ' ago'});
}

function statusEl(status) {
  return el('span', {class: `badge st-${status}`,
                     text: STATUS_TEXT[status] || status});
}

// JSON text pretty-printed, or the text as it is.
function pretty(text) {
  if (typeof text !== 'string') return JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (e) {
    return text;
  }
}

function tokens(usage) {
  return usage ? `${usage.total_tokens} tokens` : '—';
}

// --- the API ---

// An answer that is not a 2xx (STATUS), or no answer (STATUS 0).
class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

// METHOD PATH with BODY (an object, or undefined): the reply's JSON.
async function api(method, path, body) {
  const headers = {};
  if (method !== 'GET' && S.session) headers['X-CSRF-Token'] = S.session.csrf;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let r;
  try {
    r = await fetch(path, {
      method, headers, credentials: 'same-origin',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError('cannot reach the server; trying again', 0);
  }
  const text = await r.text();
  let j = null;
  try {
    j = text ? JSON.parse(text) : null;
  } catch (e) {
    j = null;
  }
  if (r.status === 401 && S.session && path !== '/ui/login') {
    showLogin('The session has ended: log in again.');
  }
  if (!r.ok) {
    throw new ApiError(j && j.error ? j.error.message : `HTTP ${r.status}`,
                       r.status);
  }
  return j;
}

// Runs FN (async) and says DONE or what failed; BUTTON is disabled
// meanwhile, and focus goes to the heading if the view's refresh removed
// it.
async function act(button, fn, done) {
  button.disabled = true;
  try {
    await fn();
    say(done);
    if (S.view) await S.view.refresh();
  } catch (e) {
    say(`Failed: ${e.message}`);
  } finally {
    button.disabled = false;
    const h = $('view').querySelector('h1');
    if (!button.isConnected && h) h.focus();
  }
}

// --- session ---

function showLogin(message) {
  closeView();
  S.session = null;
  $('nav').hidden = true;
  $('who').hidden = true;
  $('view').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message || '';
  $('token').focus();
}

function loggedIn(session) {
  S.session = session;
  $('login').hidden = true;
  $('nav').hidden = false;
  $('who').hidden = false;
  $('who-name').textContent =
      `${session.name} (${session.scopes.join(', ')})`;
  $('view').hidden = false;
  route();
}

async function login(ev) {
  ev.preventDefault();
  const input = $('token');
  const token = input.value.trim();
  try {
    const s = await api('POST', '/ui/login', {token});
    input.value = '';
    say('');
    loggedIn(s);
  } catch (e) {
    $('login-error').textContent = `Not logged in: ${e.message}`;
    input.focus();
  }
}

async function logout() {
  try {
    await api('POST', '/ui/logout');
  } catch (e) {
    // The cookie may be gone already; the page logs out all the same.
  }
  say('Logged out.');
  showLogin('');
}

async function start() {
  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', logout);
  window.addEventListener('hashchange', () => S.session && route());
  for (;;) {
    try {
      loggedIn(await api('GET', '/ui/session'));
      return;
    } catch (e) {
      if (e.status) {
        showLogin('');
        return;
      }
      say(e.message);
      await new Promise((ok) => setTimeout(ok, RECONNECT_MS));
    }
  }
}

// --- views ---

function closeView() {
  clearInterval(S.timer);
  S.timer = null;
  if (S.view && S.view.close) S.view.close();
  S.view = null;
}

// Shows VIEW ({name, node, refresh, close}) and polls its refresh.
function openView(view) {
  closeView();
  say('');
  S.view = view;
  const v = $('view');
  v.replaceChildren(view.node);
  for (const a of document.querySelectorAll('#nav a')) {
    a.toggleAttribute('aria-current',
                      a.getAttribute('href') === `#/${view.name}`);
  }
  const h = view.node.querySelector('h1');
  if (h) {
    h.tabIndex = -1;
    h.focus();
  }
  const tick = async () => {
    try {
      await view.refresh();
      if ($('status').textContent.startsWith('cannot reach')) say('');
    } catch (e) {
      say(e.message);
    }
    pendingCount();
  };
  tick();
  S.timer = setInterval(tick, POLL_MS);
}

function route() {
  const h = location.hash.replace(/^#\/?/, '');
  const parts = h.split('/');
  if (parts[0] === 'runs' && parts[1]) openView(runView(decodeURIComponent(parts[1])));
  else if (parts[0] === 'approvals') openView(approvalsView());
  else if (parts[0] === 'sandboxes') openView(sandboxesView());
  else openView(runsView());
  $('view').dataset.route = location.hash;
}

async function pendingCount() {
  try {
    const r = await api('GET', '/v1/runs?status=waiting_approval&limit=1000');
    const n = r.data.reduce((k, run) => k + run.pending_approvals.length, 0);
    $('pending-count').textContent = n ? `(${n})` : '';
  } catch (e) {
    // said by the view's own refresh
  }
}

// The buttons of a run that its status and the token's scopes allow.
function runActions(run) {
  const out = [];
  if (!can('run')) return out;
  if (UNFINISHED.includes(run.status) || run.status === 'failed') {
    out.push(el('button', {
      type: 'button', class: 'danger', text: 'Cancel',
      'aria-label': `Cancel run ${run.id}`,
      onclick: (ev) => {
        if (!confirm(`Cancel run ${run.id}?`)) return;
        act(ev.currentTarget,
            () => api('POST', `/v1/runs/${run.id}/cancel`),
            `Asked run ${run.id} to stop.`);
      },
    }));
  }
  if (run.status === 'failed' && run.origin === 'api') {
    out.push(el('button', {
      type: 'button', text: 'Retry', 'aria-label': `Retry run ${run.id}`,
      onclick: (ev) => act(ev.currentTarget,
                           () => api('POST', `/v1/runs/${run.id}/retry`),
                           `Run ${run.id} queued again.`),
    }));
  }
  return out;
}

// Keeps the children of PARENT as the nodes of ITEMS, in order, made by
// MAKE(item) once per KEY(item) and brought up to date by UPDATE: a
// refresh leaves focus and typed text where they were.
function reconcile(parent, items, key, make, update) {
  const have = new Map();
  for (const c of parent.children) have.set(c.dataset.key, c);
  const keep = new Set();
  items.forEach((item, i) => {
    const k = key(item);
    keep.add(k);
    let node = have.get(k);
    if (!node) {
      node = make(item);
      node.dataset.key = k;
    }
    update(node, item);
    if (parent.children[i] !== node) parent.insertBefore(node, parent.children[i] || null);
  });
  for (const [k, node] of have) if (!keep.has(k)) node.remove();
}

// Sets the children of NODE to the actions of ITEM when they changed.
function setActions(node, sig, make) {
  if (node.dataset.actions === sig) return;
  node.dataset.actions = sig;
  node.replaceChildren(...make());
}

function runsView() {
  const body = el('tbody');
  const empty = el('p', {class: 'hint', hidden: true, text: 'No runs yet.'});
  const node = el('div', {},
      el('h1', {text: 'Runs'}),
      el('p', {class: 'hint', text: 'The newest 50, refreshed every 2 s.'}),
      el('table', {class: 'cards'},
         el('thead', {}, el('tr', {},
            ...['Run', 'Status', 'Agent', 'Age', 'Usage', 'Actions'].map(
                (t) => el('th', {scope: 'col', text: t})))),
         body),
      empty);
  const cell = (label, cls) => el('td', {'data-label': label, class: cls});
  const make = (run) => el('tr', {'data-run': run.id},
      cell('Run', 'id'), cell('Status', 'status'), cell('Agent', 'agent'),
      cell('Age', 'age'), cell('Usage', 'usage'), cell('Actions', 'actions'));
  const update = (tr, run) => {
    const c = tr.children;
    if (!c[0].firstChild) {
      c[0].append(el('a', {href: `#/runs/${run.id}`, text: run.id}));
    }
    c[1].replaceChildren(statusEl(run.status));
    c[2].textContent = run.agent || '—';
    c[3].replaceChildren(timeEl(run.created_at));
    c[4].textContent = tokens(run.usage);
    const acts = runActions(run);
    setActions(c[5], `${run.status}/${run.origin}/${acts.length}`, () => acts);
  };
  return {
    name: 'runs', node,
    refresh: async () => {
      const r = await api('GET', '/v1/runs?limit=50');
      reconcile(body, r.data, (run) => run.id, make, update);
      empty.hidden = r.data.length > 0;
    },
  };
}

// A pending approval of RUN as a card: the tool, its arguments, and (with
// the approve scope) Approve, and Reject with a reason.
let cards = 0;
function approvalCard(run, p) {
  const reasonId = `reason-${++cards}`;
  const what = `${p.tool} call ${p.call_id} of run ${run.id}`;
  const card = el('article', {class: 'approval',
                              'data-approval': `${run.id}/${p.call_id}`},
      el('h3', {}, `${p.tool} `, el('span', {class: 'hint', text: `call ${p.call_id}`})),
      el('p', {}, 'Run ', el('a', {href: `#/runs/${run.id}`, text: run.id}),
         ` of agent ${run.agent || '—'}`),
      el('pre', {class: 'args', text: pretty(p.arguments)}));
  if (!can('approve')) {
    card.append(el('p', {class: 'hint',
                         text: 'Deciding needs a token with the approve scope.'}));
    return card;
  }
  const reason = el('input', {id: reasonId, type: 'text', maxlength: 2000});
  const decide = (decision) => (ev) => {
    const body = {decision};
    if (decision === 'reject' && reason.value.trim()) body.reason = reason.value.trim();
    act(ev.currentTarget,
        () => api('POST', `/v1/runs/${run.id}/approvals/${encodeURIComponent(p.call_id)}`, body),
        `${decision === 'approve' ? 'Approved' : 'Rejected'} ${p.tool} (${p.call_id}) of run ${run.id}.`);
  };
  card.append(el('div', {class: 'decide'},
      el('button', {type: 'button', class: 'approve', text: 'Approve',
                    'aria-label': `Approve ${what}`, onclick: decide('approve')}),
      el('label', {for: reasonId, text: 'Reason for a rejection'}),
      reason,
      el('button', {type: 'button', class: 'danger', text: 'Reject',
                    'aria-label': `Reject ${what}`, onclick: decide('reject')})));
  return card;
}

function approvalsView() {
  const list = el('div', {class: 'approvals'});
  const empty = el('p', {class: 'hint', hidden: true,
                         text: 'No call waits for a decision.'});
  const node = el('div', {}, el('h1', {text: 'Pending approvals'}), list, empty);
  return {
    name: 'approvals', node,
    refresh: async () => {
      const r = await api('GET', '/v1/runs?status=waiting_approval&limit=1000');
      const items = [];
      for (const run of r.data) {
        for (const p of run.pending_approvals) items.push({run, p});
      }
      reconcile(list, items, (x) => `${x.run.id}/${x.p.call_id}`,
                (x) => approvalCard(x.run, x.p), () => {});
      empty.hidden = items.length > 0;
    },
  };
}

function sandboxesView() {
  const body = el('tbody');
  const empty = el('p', {class: 'hint', hidden: true, text: 'No sandboxes.'});
  const node = el('div', {},
      el('h1', {text: 'Sandboxes'}),
      el('p', {class: 'hint', text: 'Sandboxes that outlive a run (POST /v1/sandboxes).'}),
      el('table', {class: 'cards'},
         el('thead', {}, el('tr', {},
            ...['Sandbox', 'Status', 'Backend', 'Owner', 'Age', 'Actions'].map(
                (t) => el('th', {scope: 'col', text: t})))),
         body),
      empty);
  const make = (sb) => {
    const tr = el('tr', {'data-sandbox': sb.id},
        el('td', {'data-label': 'Sandbox', class: 'id', text: sb.id}),
        el('td', {'data-label': 'Status', text: sb.status || '—'}),
        el('td', {'data-label': 'Backend', text: sb.backend || '—'}),
        el('td', {'data-label': 'Owner', text: sb.owner || '—'}),
        el('td', {'data-label': 'Age'}, timeEl(sb.created_at)),
        el('td', {'data-label': 'Actions'}));
    if (can('run')) {
      tr.lastChild.append(el('button', {
        type: 'button', class: 'danger', text: 'Delete',
        'aria-label': `Delete sandbox ${sb.id}`,
        onclick: (ev) => {
          if (!confirm(`Delete sandbox ${sb.id} and its workspace?`)) return;
          act(ev.currentTarget, () => api('DELETE', `/v1/sandboxes/${sb.id}`),
              `Sandbox ${sb.id} deleted.`);
        },
      }));
    }
    return tr;
  };
  return {
    name: 'sandboxes', node,
    refresh: async () => {
      const r = await api('GET', '/v1/sandboxes');
      reconcile(body, r.data, (sb) => sb.id, make,
                (tr, sb) => {
                  tr.children[1].textContent = sb.status || '—';
                  tr.children[4].replaceChildren(timeEl(sb.created_at));
                });
      empty.hidden = r.data.length > 0;
    },
  };
}

// --- a run's page ---

// Renders the events of one run into LIST as they come.
function eventRenderer(list) {
  const calls = new Map(); // depth/call_id -> the call's item
  const texts = new Map(); // depth/agent/turn -> the text's <pre>
  // An item per event, but a call's end and the model's text go into the
  // item they continue; data-seqs lists the events each item shows.
  const more = (li, ev) => { li.dataset.seqs += ` ${ev.seq}`; };
  const item = (ev, title, ...rest) => {
    const li = el('li', {'data-type': ev.type, 'data-seqs': ev.seq},
        el('p', {class: 'ev-head'},
           el('span', {class: 'seq', text: `#${ev.seq}`}), ' ',
           el('strong', {text: title})),
        ...rest);
    list.append(li);
    return li;
  };
  const where = (ev) => (ev.depth ? ` (in ${ev.agent}, depth ${ev.depth})` : '');
  const on = {
    run_started: (ev) => item(ev, `Run started: agent ${ev.agent}, model ${ev.model}`),
    sandbox_created: (ev) => item(ev, `Sandbox ready for ${ev.agent} (${ev.backend})`),
    text_delta: (ev) => {
      const k = `${ev.depth}/${ev.agent}/${ev.turn}`;
      let pre = texts.get(k);
      if (pre) more(pre.parentNode, ev);
      else {
        pre = el('pre', {class: 'text'});
        item(ev, `Model text${where(ev)}`, pre);
        texts.set(k, pre);
      }
      pre.textContent += ev.delta;
    },
    tool_call_started: (ev) => {
      const li = item(ev, `Tool call ${ev.name} (${ev.call_id})${where(ev)}`,
          el('p', {class: 'label', text: 'Arguments'}),
          el('pre', {class: 'args', text: pretty(ev.arguments)}),
          el('p', {class: 'call-status', text: 'running…'}));
      calls.set(`${ev.depth}/${ev.call_id}`, li);
    },
    tool_call_finished: (ev) => {
      let li = calls.get(`${ev.depth}/${ev.call_id}`);
      if (li) more(li, ev);
      else li = item(ev, `Tool call ${ev.name} (${ev.call_id})${where(ev)}`);
      const st = li.querySelector('.call-status') || li.appendChild(el('p'));
      st.className = `call-status call-${ev.status}`;
      st.textContent = `${ev.status} in ${ev.duration_ms} ms` +
          (ev.error ? `: ${ev.error}` : '');
      if (ev.output !== null && ev.output !== undefined) {
        li.append(el('p', {class: 'label', text: 'Output'}),
                  el('pre', {class: 'output',
                             text: typeof ev.output === 'string' ? ev.output
                                                                 : pretty(ev.output)}));
      }
    },
    approval_requested: (ev) => item(ev, `Waits for approval: ${ev.name} (${ev.call_id})`,
        el('pre', {class: 'args', text: pretty(ev.arguments)})),
    agent_tool_started: (ev) => item(ev, `Agent ${ev.agent} started as a tool of ${ev.parent_agent}`),
    handoff: (ev) => item(ev, `Handoff from ${ev.from} to ${ev.to}`),
    turn_finished: (ev) => item(ev, `Turn ${ev.turn} finished${where(ev)}: ` +
        `${ev.tool_calls} tool call${ev.tool_calls === 1 ? '' : 's'}, ` +
        tokens(ev.usage)),
    run_paused: (ev) => item(ev, 'Paused: waiting for approval'),
    run_finished: (ev) => item(ev, 'Final answer',
        el('pre', {class: 'final', text: ev.final_output})),
    run_failed: (ev) => item(ev, `Failed (${ev.code})`,
        el('pre', {class: 'error', text: ev.error})),
    run_cancelled: (ev) => item(ev, 'Cancelled'),
  };
  return (ev) => (on[ev.type] || ((e) => item(e, e.type)))(ev);
}

// The events of run ID from the server, each once and in order: the
// browser resumes a dropped stream with Last-Event-ID; a stream the server
// refused or ended early is opened again after the last event seen. The
// stream stops at the run's last event; resume() takes it up again (a
// failed run that was retried goes on), close() ends it for good.
function eventStream(id, render, onEnd) {
  let last = 0;
  let es = null;
  let timer = null;
  let over = false; // at the run's last event, or closed
  let closed = false;
  const stop = () => {
    over = true;
    clearTimeout(timer);
    timer = null;
    if (es) es.close();
  };
  const onEvent = (m) => {
    const seq = Number(m.lastEventId);
    if (!(seq > last)) return;
    last = seq;
    const ev = JSON.parse(m.data);
    render(ev);
    if (TERMINAL.includes(ev.type)) {
      stop();
      onEnd(ev);
    }
  };
  const open = () => {
    timer = null;
    if (over) return;
    const q = last ? `?after=${last}` : '';
    es = new EventSource(`/v1/runs/${encodeURIComponent(id)}/events${q}`);
    for (const t of EVENT_TYPES) es.addEventListener(t, onEvent);
    es.onopen = () => {
      if ($('status').textContent === INTERRUPTED) say('');
    };
    es.onerror = () => {
      if (over) return;
      say(INTERRUPTED);
      if (es.readyState === EventSource.CLOSED && !timer) {
        timer = setTimeout(open, RECONNECT_MS);
      }
    };
  };
  open();
  return {
    close: () => {
      closed = true;
      stop();
    },
    resume: () => {
      if (!over || closed) return;
      over = false;
      open();
    },
  };
}

function runView(id) {
  const head = el('dl', {class: 'run-head'});
  const actions = el('div', {class: 'run-actions'});
  const pendingHead = el('h2', {text: 'Waiting for a decision', hidden: true});
  const pending = el('div', {class: 'approvals'});
  const events = el('ol', {class: 'events'});
  const node = el('div', {},
      el('p', {}, el('a', {href: '#/runs', text: '← Runs'})),
      el('h1', {text: `Run ${id}`}), head, actions, pendingHead, pending,
      el('h2', {text: 'Events'}), events);
  const render = eventRenderer(events);
  const row = (k, v) => [el('dt', {text: k}), el('dd', {}, v)];
  const view = {
    name: 'runs', node,
    refresh: async () => {
      const run = await api('GET', `/v1/runs/${encodeURIComponent(id)}`);
      head.replaceChildren(
          ...row('Status', statusEl(run.status)),
          ...row('Agent', run.agent || '—'),
          ...row('Created', timeEl(run.created_at)),
          ...row('Usage', tokens(run.usage)),
          ...(run.final_output !== null ? row('Answer', el('pre', {class: 'final', text: run.final_output})) : []),
          ...(run.error ? row('Error', `${run.error.code}: ${run.error.message}`) : []));
      const acts = runActions(run);
      setActions(actions, `${run.status}/${run.origin}/${acts.length}`, () => acts);
      reconcile(pending, run.pending_approvals, (p) => `${run.id}/${p.call_id}`,
                (p) => approvalCard(run, p), () => {});
      pendingHead.hidden = run.pending_approvals.length === 0;
      if (UNFINISHED.includes(run.status)) stream.resume();
    },
  };
  const stream = eventStream(id, render, () => view.refresh().catch(() => {}));
  view.close = stream.close;
  return view;
}

document.addEventListener('DOMContentLoaded', start);
