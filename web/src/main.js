// main.js: the termgate browser terminal. Tabs of xterm.js terminals, each
// bound to one execution followed by the shared TermgateClient.
import '@xterm/xterm/css/xterm.css';
import './style.css';
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { WebLinksAddon } from '@xterm/addon-web-links';
import { TermgateClient } from './termgate-client.js';
import { TESTING, Transcript, installTestHooks } from './testhooks.js';

const TOKEN_KEY = 'termgate.token';
const TABS_KEY = 'termgate.tabs';
const RESIZE_DEBOUNCE_MS = 150;

/**
 * @typedef {import('./termgate-client.js').Message} Message
 * @typedef {import('./termgate-client.js').ExitInfo} ExitInfo
 * @typedef {import('./termgate-client.js').StatusChange} StatusChange
 * @typedef {{id: string | null, readOnly: boolean}} Fragment what location.hash asked for
 * @typedef {{id?: string, readOnly?: boolean}} TabTarget attach to id, or start one
 * @typedef {{from: number, to: number, bytes: number, cause: string, inexact: boolean}} GapInfo output the gateway no longer held
 * @typedef {{error?: string, message: string, fatal?: boolean}} ErrorInfo an
 *   'error' event of the client or of an execution
 * @typedef {ExitInfo & {error?: boolean}} TabExit how a tab's execution
 *   ended; error when a fatal error, not an exit, ended it here
 */

/**
 * required returns value, and throws when it is null. The elements looked
 * up are in index.html or built here, so a missing one is a bug: it is
 * named at once instead of failing later as a null dereference.
 * @template T
 * @param {T | null} value
 * @param {string} what names the missing element
 * @returns {T}
 */
function required(value, what) {
  if (value === null) throw new Error(`termgate: the page has no ${what}`);
  return value;
}

/**
 * byId returns the page's element with this id (see required).
 * @param {string} id
 * @returns {HTMLElement}
 */
function byId(id) {
  return required(document.getElementById(id), `#${id} element`);
}

// The sequences xterm.js answers at once through onData (its InputHandler
// and CoreBrowserTerminal): device attributes, status and cursor reports,
// mode and setting requests, window reports, colour queries, and DECSET
// (enabling focus events, 1004, reports the focus right away).
const ANSWERED_CSI = [
  { final: 'c' }, { prefix: '>', final: 'c' },
  { final: 'n' }, { prefix: '?', final: 'n' },
  { intermediates: '$', final: 'p' }, { prefix: '?', intermediates: '$', final: 'p' },
  { final: 't' }, { prefix: '?', final: 'h' },
];
const ANSWERED_DCS = [{ intermediates: '$', final: 'q' }];
const ANSWERED_OSC = [4, 10, 11, 12];

/**
 * readFragment takes the parameters from location.hash, keeps the token in
 * sessionStorage only and removes the fragment from the address bar, so the
 * token never lands in history, bookmarks or a Referer.
 * @returns {Fragment}
 */
function readFragment() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ''));
  const token = params.get('token');
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  if (location.hash) history.replaceState(history.state, '', location.pathname + location.search);
  return { id: params.get('id'), readOnly: params.get('readonly') === '1' };
}

/**
 * tokenExpired reports whether a token's exp claim has passed. The claim
 * is read, not verified, and only to say why the gateway refused the
 * token: the gateway decides, with its own clock.
 * @param {string} token
 * @returns {boolean}
 */
function tokenExpired(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const { exp } = JSON.parse(atob(part));
    return typeof exp === 'number' && exp * 1000 <= Date.now();
  } catch {
    return false;
  }
}

/**
 * openLink opens a clicked link in a new tab that cannot reach this page.
 * @param {MouseEvent} event
 * @param {string} uri
 */
function openLink(event, uri) {
  if (!event || event.type !== 'click' && event.type !== 'mouseup') return;
  let url;
  try {
    url = new URL(uri);
  } catch {
    return;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return;
  window.open(url.href, '_blank', 'noopener,noreferrer');
}

/**
 * debounce returns fn delayed until ms passed without another call.
 * @template {unknown[]} A
 * @param {(...args: A) => void} fn
 * @param {number} ms
 * @returns {(...args: A) => void}
 */
function debounce(fn, ms) {
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let t;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}

/** Tab is one terminal bound to one execution. */
class Tab {
  /**
   * @param {App} app
   * @param {TabTarget} how
   */
  constructor(app, how) {
    this.app = app;
    /** Output for the test hooks, kept under automation only (testhooks.js). */
    this.transcript = TESTING ? new Transcript() : null;
    this.readOnly = !!how.readOnly;
    /** @type {TabExit | null} */
    this.exit = null;
    /** Whether history is being replayed (xterm's answers are dropped). */
    this.muted = false;
    /** Whether xterm is parsing a query it answers through onData. */
    this.answering = false;
    this.term = new Terminal({
      cursorBlink: true,
      scrollback: 5000,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
      fontSize: 14,
      disableStdin: this.readOnly,
      theme: { background: '#1e1e1e' },
    });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.loadAddon(new WebLinksAddon(openLink));
    // A program must not write the viewer's clipboard (OSC 52).
    this.term.parser.registerOscHandler(52, () => true);
    this.watchQueries();
    this.term.attachCustomKeyEventHandler((e) => this.onKey(e));
    this.el = document.createElement('div');
    this.el.className = 'term';
    this.el.hidden = true;
    byId('terminals').append(this.el);
    this.term.open(this.el);
    this.button = this.makeButton();
    // Fit before starting, so the PTY starts at the window's size.
    this.el.hidden = false;
    this.fitNow();
    this.el.hidden = true;
    this.ex = how.id
      ? app.client.attach(how.id, { readOnly: this.readOnly })
      : app.client.start({ pty: { rows: this.term.rows, cols: this.term.cols } });
    this.bind();
  }

  makeButton() {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'tab';
    b.setAttribute('role', 'tab');
    const label = document.createElement('span');
    label.className = 'label';
    label.textContent = 'terminal';
    const close = document.createElement('span');
    close.className = 'close';
    close.textContent = '\u00d7';
    close.title = 'Close (stops the command)';
    b.append(label, close);
    b.addEventListener('click', (e) => {
      if (e.target === close) this.app.closeTab(this);
      else this.app.activate(this);
    });
    byId('tabs').append(b);
    return b;
  }

  bind() {
    const ex = this.ex;
    ex.on('attached', /** @param {Message} m */ (m) => {
      this.readOnly = ex.readOnly;
      this.term.options.disableStdin = this.readOnly;
      const label = required(this.button.querySelector('.label'), 'tab label');
      label.textContent = m.id + (this.readOnly ? ' (read-only)' : '');
      this.app.saveTabs();
      this.app.render();
    });
    ex.on('replay', /** @param {boolean} on */ (on) => {
      if (on) this.muted = true;
      // Unmute only once xterm has parsed everything replayed: it parses
      // writes later, and answers queries while it does.
      else this.term.write('', () => { if (!ex.replaying) this.muted = false; });
    });
    ex.on('output', /** @param {Uint8Array} bytes */ (bytes) => {
      this.transcript?.add(bytes);
      // xterm decodes UTF-8 statefully across writes. The output counts as
      // processed once xterm has parsed it: a program that outruns the
      // browser waits, instead of xterm's write queue growing.
      this.term.write(bytes, ex.defer());
    });
    ex.on('gap', /** @param {GapInfo} g */ (g) => this.notice('gap-notice', lossText(g)));
    ex.on('exit', /** @param {ExitInfo} x */ (x) => {
      this.exit = x;
      this.button.classList.add('exited');
      this.term.write(`\r\n\x1b[2m[termgate: ${exitText(x)}]\x1b[0m\r\n`);
      this.app.saveTabs();
      this.app.render();
    });
    ex.on('error', /** @param {ErrorInfo} e */ (e) => {
      this.notice('error-notice', e.message || e.error || '');
      if (e.fatal) {
        this.exit = this.exit ?? { code: -1, signal: '', reason: e.error ?? '', seq: 0, error: true };
        this.button.classList.add('exited');
        this.app.saveTabs();
        this.app.render();
      }
    });
    this.term.onData((d) => this.input(d));
    this.term.onBinary((d) => this.input(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)));
    this.term.onResize(debounce(({ rows, cols }) => this.ex.resize(rows, cols), RESIZE_DEBOUNCE_MS));
  }

  /**
   * watchQueries marks the moments xterm answers a terminal query. It
   * answers synchronously while it parses the query, in a task of its own
   * that no keystroke shares, so the mark lasts until that task ends (the
   * next microtask checkpoint). The hooks return false: xterm still answers.
   */
  watchQueries() {
    const mark = () => {
      if (!this.answering) {
        this.answering = true;
        queueMicrotask(() => { this.answering = false; });
      }
      return false;
    };
    const p = this.term.parser;
    for (const id of ANSWERED_CSI) p.registerCsiHandler(id, mark);
    for (const id of ANSWERED_DCS) p.registerDcsHandler(id, mark);
    for (const n of ANSWERED_OSC) p.registerOscHandler(n, mark);
  }

  /**
   * input sends what the user typed. During replay, xterm answers the
   * replayed terminal queries (DA, DSR, DECRQM, DECRQSS, OSC colours)
   * through onData too: those answers must not be typed into the shell, so
   * they are dropped, and only they: keys typed meanwhile are sent.
   * @param {string | Uint8Array} data
   */
  input(data) {
    if (this.readOnly || this.ex.closed) return;
    if (this.muted && this.answering) return;
    // Waits, in order, while the input the gateway has not acknowledged
    // is at its bound: a large paste is delivered whole, never dropped.
    this.ex.writeAsync(data);
  }

  /**
   * onKey maps Ctrl+Shift+C to copy and leaves Ctrl+Shift+V to the browser's paste.
   * @param {KeyboardEvent} e
   * @returns {boolean} whether xterm handles the key
   */
  onKey(e) {
    if (e.type !== 'keydown' || !e.ctrlKey || !e.shiftKey) return true;
    if (e.code === 'KeyC') {
      const sel = this.term.getSelection();
      if (sel) navigator.clipboard?.writeText(sel).catch(() => {});
      e.preventDefault();
      return false;
    }
    return e.code !== 'KeyV';
  }

  /**
   * @param {'gap-notice' | 'error-notice'} cls
   * @param {string} text
   */
  notice(cls, text) {
    if (cls === 'gap-notice') this.term.write(`\r\n\x1b[33m[termgate: ${text}]\x1b[0m\r\n`);
    showNotice(cls, (this.ex.id ? this.ex.id + ': ' : '') + text);
  }

  fitNow() {
    if (this.el.hidden) return;
    try {
      this.fit.fit();
    } catch {
      // not laid out yet
    }
  }

  /** @param {boolean} on */
  show(on) {
    this.el.hidden = !on;
    this.button.setAttribute('aria-selected', String(on));
    if (on) {
      this.fitNow();
      this.term.focus();
    }
  }

  dispose() {
    this.ex.detach();
    this.term.dispose();
    this.el.remove();
    this.button.remove();
  }
}

/**
 * showNotice adds a notice above the terminals, keeping the newest five.
 * @param {'gap-notice' | 'error-notice'} cls
 * @param {string} text
 */
function showNotice(cls, text) {
  const notices = byId('notices');
  const n = document.createElement('div');
  n.className = cls;
  n.textContent = text;
  notices.append(n);
  while (notices.children.length > 5) notices.firstElementChild?.remove();
}

/** Why output was lost, by a gap's cause. */
const LOSS_CAUSES = /** @type {Record<string, string>} */ ({
  hold_expired: 'the hold expired before a writer came back',
  unheld: 'they were evicted while no acknowledging writer was attached',
  read_only: 'a read-only viewer does not hold output, and this one fell behind',
  live: 'the execution runs with flow live, which never waits for a slow reader',
  '': 'the gateway no longer held them',
});

/**
 * lossText says how much output a gap lost, and why.
 * @param {GapInfo} g
 * @returns {string}
 */
function lossText(g) {
  const n = `${g.inexact ? 'up to ' : ''}${g.bytes} bytes`;
  return `${n} of output were lost: ${LOSS_CAUSES[g.cause ?? ''] ?? `cause ${g.cause}`}`;
}

/**
 * exitText says how an execution ended: "exited with code N" or "killed by
 * SIGNAME", plus the reason when it is not a plain exit.
 * @param {ExitInfo} x
 * @returns {string}
 */
function exitText(x) {
  let s = x.signal ? `killed by ${x.signal}` : `exited with code ${x.code}`;
  if (x.reason && x.reason !== 'exited') s += ` (${x.reason.replace(/_/g, ' ')})`;
  return s;
}

/** App holds the client, the tabs and the status line. */
class App {
  /** @param {Fragment} fragment */
  constructor(fragment) {
    /** @type {Tab[]} */
    this.tabs = [];
    /** @type {Tab | null} */
    this.active = null;
    /** @type {StatusChange} */
    this.conn = { state: 'connecting' };
    this.reconnectAt = 0;
    /** Whether the gateway refused the token (see checkToken). */
    this.refused = false;
    this.checking = false;
    this.client = new TermgateClient({
      // null stops the reconnecting: the gateway refused this token.
      getToken: () => (this.refused ? null : sessionStorage.getItem(TOKEN_KEY) ?? ''),
    });
    this.client.on('status', /** @param {StatusChange} s */ (s) => {
      if (s.state === 'reconnecting' && this.conn.state === 'connecting') this.checkToken();
      this.conn = s;
      this.reconnectAt = s.state === 'reconnecting' ? performance.now() + (s.delay ?? 0) : 0;
      this.render();
    });
    this.client.on('error', /** @param {ErrorInfo} e */ (e) => this.notice(e.message || e.error || ''));
    setInterval(() => this.reconnectAt && this.render(), 250);
    byId('new-tab').addEventListener('click', () => this.activate(this.addTab({})));
    window.addEventListener('resize', debounce(() => this.active?.fitNow(), RESIZE_DEBOUNCE_MS));
    this.openInitial(fragment);
  }

  /**
   * checkToken asks the HTTP API whether the gateway accepts the token,
   * after a WebSocket failed before it opened: a page cannot see why a
   * handshake failed. A refused token stops the reconnecting.
   */
  async checkToken() {
    if (this.checking || this.refused) return;
    this.checking = true;
    try {
      const token = sessionStorage.getItem(TOKEN_KEY) ?? '';
      const r = await fetch('/v1/executions', { headers: { Authorization: `Bearer ${token}` }, cache: 'no-store' });
      if (r.status === 401) {
        this.refused = true;
        this.render();
      }
    } catch {
      // The gateway is unreachable: the client keeps trying.
    } finally {
      this.checking = false;
    }
  }

  /** @param {Fragment} fragment */
  openInitial(fragment) {
    if (fragment.id) {
      this.activate(this.addTab({ id: fragment.id, readOnly: fragment.readOnly }));
      return;
    }
    // After a reload, follow the executions this browser tab had open
    // instead of leaving their shells behind and starting new ones.
    let saved = [];
    try {
      saved = JSON.parse(sessionStorage.getItem(TABS_KEY) ?? '[]');
    } catch {
      saved = [];
    }
    for (const t of saved) if (t && typeof t.id === 'string') this.addTab({ id: t.id, readOnly: !!t.readOnly });
    if (this.tabs.length === 0) this.addTab({});
    this.activate(this.tabs[this.tabs.length - 1]);
  }

  /** @param {TabTarget} how */
  addTab(how) {
    const tab = new Tab(this, how);
    this.tabs.push(tab);
    return tab;
  }

  /** @param {Tab} tab */
  activate(tab) {
    this.active = tab;
    for (const t of this.tabs) t.show(t === tab);
    this.render();
  }

  /** @param {Tab} tab */
  closeTab(tab) {
    if (!tab.exit && !tab.readOnly) tab.ex.cancel();
    tab.dispose();
    this.tabs = this.tabs.filter((t) => t !== tab);
    this.saveTabs();
    if (this.active === tab) {
      if (this.tabs.length === 0) this.addTab({});
      this.activate(this.tabs[this.tabs.length - 1]);
    }
  }

  saveTabs() {
    const open = this.tabs.filter((t) => !t.exit && t.ex.id).map((t) => ({ id: t.ex.id, readOnly: t.readOnly }));
    sessionStorage.setItem(TABS_KEY, JSON.stringify(open));
  }

  /** @param {string} text */
  notice(text) {
    showNotice('error-notice', text);
  }

  /** state is the status line's data-state for the active tab. */
  state() {
    const tab = this.active;
    if (tab?.exit) return 'exited';
    if (this.conn.state === 'live' && tab?.readOnly) return 'read-only';
    if (this.refused) return tokenExpired(sessionStorage.getItem(TOKEN_KEY) ?? '') ? 'expired' : 'refused';
    return this.conn.state === 'closed' ? 'refused' : this.conn.state;
  }

  render() {
    const el = byId('status');
    const state = this.state();
    const exit = this.active?.exit;
    let text = state;
    el.removeAttribute('data-exit-code');
    if (state === 'exited' && exit) { // state() says exited only with an exit
      text = exit.error ? `ended: ${exit.reason}` : exitText(exit);
      el.setAttribute('data-exit-code', String(exit.code));
    } else if (state === 'reconnecting') {
      const secs = Math.max(0, Math.ceil((this.reconnectAt - performance.now()) / 1000));
      text = `reconnecting in ${secs} s`;
    } else if (state === 'read-only') {
      text = 'live (read-only)';
    } else if (state === 'expired') {
      text = 'token expired: open a new link (the commands keep running)';
    } else if (state === 'refused') {
      text = 'token refused by the gateway: open a new link';
    }
    el.dataset.state = state;
    if (el.textContent !== text) el.textContent = text;
  }
}

const app = new App(readFragment());

if (TESTING) {
  installTestHooks({
    transcript: () => app.active?.transcript?.text() ?? '',
    status: () => byId('status').dataset.state,
    connections: () => app.client.connections,
    execution: () => app.active?.ex.id ?? null,
    replaying: () => !!app.active?.muted,
  });
}
