// main.js: the termgate browser terminal. Tabs of xterm.js terminals, each
// bound to one execution followed by the shared TermgateClient, and the
// list of the tenant's executions to reattach or cancel.
import '@xterm/xterm/css/xterm.css';
import './style.css';
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { WebLinksAddon } from '@xterm/addon-web-links';
import { SearchAddon } from '@xterm/addon-search';
import { Unicode11Addon } from '@xterm/addon-unicode11';
import { TermgateClient } from '../client/src/index.js';
import { TESTING, Transcript, installTestHooks } from './testhooks.js';
import { readClaims, sameIdentity, expired, canWrite, whoText, shown } from './claims.js';
import { ExecutionsAPI, ExecutionsError } from './executions.js';
import { ExecutionList } from './list.js';
import { Flag, Titles } from './prefs.js';
import { noticeLine, noticeText, connectionText, endedText } from './notices.js';
import { SearchBar } from './search.js';

/** The token, in localStorage: every page of this origin uses one, and a link that would replace it with another identity's asks first. */
const TOKEN_KEY = 'termgate.token';
/** The executions this browser tab shows, in sessionStorage: a reload follows them again. */
const TABS_KEY = 'termgate.tabs';
const TITLES_KEY = 'termgate.titles';
const COPY_KEY = 'termgate.copyOnSelect';
const RESIZE_DEBOUNCE_MS = 150;
/** Longest tab label; the whole title is the tab's tooltip. */
const LABEL_MAX = 40;
/** What a page without a token says in place of the terminals. */
const NO_TOKEN_TEXT = 'This page needs a token: run `termgate token --secret-file FILE --tenant TENANT` and open' +
  ' this page with #token=<the token> after its address, or open the URL `termgate serve --dev` printed.';

/**
 * @typedef {import('../client/src/termgate-client.js').Message} Message
 * @typedef {import('../client/src/termgate-client.js').ExitInfo} ExitInfo
 * @typedef {import('../client/src/termgate-client.js').StatusChange} StatusChange
 * @typedef {{token: string | null, id: string | null, readOnly: boolean}} Fragment what location.hash asked for
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
 * storedToken is the page's token, or null without one. A token kept by
 * an older page in sessionStorage moves to localStorage.
 * @returns {string | null}
 */
function storedToken() {
  const old = sessionStorage.getItem(TOKEN_KEY);
  if (old !== null) {
    sessionStorage.removeItem(TOKEN_KEY);
    if (!localStorage.getItem(TOKEN_KEY)) localStorage.setItem(TOKEN_KEY, old);
  }
  return localStorage.getItem(TOKEN_KEY) || null;
}

/**
 * readFragment takes the parameters from location.hash and removes the
 * fragment from the address bar, so the token never lands in history,
 * bookmarks or a Referer. The token is not stored here: see App.offerToken.
 * @returns {Fragment}
 */
function readFragment() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ''));
  if (location.hash) history.replaceState(history.state, '', location.pathname + location.search);
  return { token: params.get('token') || null, id: params.get('id'), readOnly: params.get('readonly') === '1' };
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
    /** The terminal's title (OSC 0 or 2), as text; '' until a program sets one. */
    this.title = '';
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
      // The unicode version API (wide characters) and the search's
      // decorations are proposed APIs.
      allowProposedApi: true,
    });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.loadAddon(new WebLinksAddon(openLink));
    // East Asian wide characters and emoji take two cells, as in the
    // programs' own wcwidth (Unicode 11 widths rather than xterm's 6).
    this.term.loadAddon(new Unicode11Addon());
    this.term.unicode.activeVersion = '11';
    this.search = new SearchAddon();
    this.term.loadAddon(this.search);
    this.search.onDidChangeResults((r) => this.app.active === this && this.app.searchBar.results(r));
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
    // Fit before starting or attaching, so the PTY is the window's size.
    this.el.hidden = false;
    this.fitNow();
    this.el.hidden = true;
    this.ex = how.id
      ? app.client.attach(how.id, { readOnly: this.readOnly, snapshot: true, ports: true })
      : app.client.start({ pty: { rows: this.term.rows, cols: this.term.cols }, snapshot: true, ports: true });
    // A page that may type makes the terminal it attaches to its window's
    // size, so the program draws for the screen it shows (sent once
    // attached, and only where the execution has a PTY and the page may
    // write).
    if (how.id) this.ex.resize(this.term.rows, this.term.cols);
    this.bind();
    this.label();
  }

  makeButton() {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'tab';
    b.setAttribute('role', 'tab');
    const label = document.createElement('span');
    label.className = 'label';
    const close = document.createElement('span');
    close.className = 'close';
    close.textContent = '\u00d7';
    close.title = 'Close the tab (the command keeps running: reattach it from Executions)';
    b.append(label, close);
    b.addEventListener('click', (e) => {
      if (e.target === close) this.app.closeTab(this);
      else this.app.activate(this);
    });
    byId('tabs').append(b);
    return b;
  }

  /** labelText is what the tab shows: the title, else the execution's ID. */
  labelText() {
    const name = shown(this.title, LABEL_MAX) || this.ex.id || 'terminal';
    return name + (this.readOnly ? ' (read-only)' : '');
  }

  /** label shows labelText on the tab (as text: a title is the program's). */
  label() {
    const label = required(this.button.querySelector('.label'), 'tab label');
    const text = this.labelText();
    if (label.textContent !== text) label.textContent = text;
    this.button.title = [shown(this.title, 200), this.ex.id].filter(Boolean).join('\n');
  }

  bind() {
    const ex = this.ex;
    ex.on('attached', () => {
      this.readOnly = ex.readOnly;
      this.term.options.disableStdin = this.readOnly;
      if (!this.title) this.title = this.app.titleOf(ex.id ?? '');
      this.label();
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
    ex.on('event', /** @param {Message & {event?: string, at?: string | number}} m */ (m) => {
      if (m.event !== 'notice') return;
      this.term.write(noticeLine(m));
      showNotice('warn-notice', (ex.id ? ex.id + ': ' : '') + noticeText(m));
    });
    ex.on('gap', /** @param {GapInfo} g */ (g) => this.notice('gap-notice', lossText(g)));
    ex.on('ports', () => { if (this.app.active === this) this.app.renderPorts(); });
    // The screen in place of history the gateway no longer holds: drawn on
    // a fresh terminal of its size, then fitted back to the window, which
    // tells the program the window's size.
    ex.on('snapshot', /** @param {{data: string, rows: number, cols: number}} s */ (s) => {
      this.term.reset();
      if (s.rows > 0 && s.cols > 0) this.term.resize(s.cols, s.rows);
      this.term.write(s.data, () => { if (!this.el.hidden) this.fitNow(); });
    });
    ex.on('exit', /** @param {ExitInfo} x */ (x) => {
      this.term.write(`\r\n\x1b[2m[termgate: ${exitText(x)}]\x1b[0m\r\n`);
      this.ended(x);
    });
    ex.on('error', /** @param {ErrorInfo} e */ (e) => {
      this.notice('error-notice', e.message || e.error || '');
      if (!e.fatal) return;
      if (!this.exit) this.term.write(`\r\n\x1b[2m[termgate: ${endedText(e.error ?? '')}]\x1b[0m\r\n`);
      this.ended(this.exit ?? { code: -1, signal: '', reason: e.error ?? '', seq: 0, error: true });
    });
    this.term.onData((d) => this.input(d));
    this.term.onBinary((d) => this.input(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)));
    this.term.onResize(debounce(({ rows, cols }) => this.ex.resize(rows, cols), RESIZE_DEBOUNCE_MS));
    this.term.onTitleChange((title) => {
      this.title = title;
      this.label();
      if (ex.id) this.app.titles.set(this.app.identity(), ex.id, title);
    });
    this.term.onSelectionChange(() => {
      const sel = this.term.getSelection();
      // A match the search selects is not the viewer's selection.
      if (sel && this.app.copyOnSelect.get() && !this.app.searchBar.finding) navigator.clipboard?.writeText(sel).catch(() => {});
    });
  }

  /**
   * ended marks the tab's execution as over and offers a new shell in its place.
   * @param {TabExit} x
   */
  ended(x) {
    this.exit = x;
    this.button.classList.add('exited');
    if (!this.el.querySelector('.new-shell')) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'new-shell';
      b.textContent = 'New shell';
      b.title = 'Start a new shell in this tab';
      b.addEventListener('click', () => this.app.replaceTab(this));
      this.el.append(b);
    }
    this.app.saveTabs();
    this.app.render();
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
   * onKey maps Ctrl+Shift+C to copy and Ctrl+Shift+F to search, and
   * leaves Ctrl+Shift+V to the browser's paste.
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
    if (e.code === 'KeyF') {
      this.app.searchBar.open();
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

  /** dispose detaches (the execution keeps running) and removes the tab. */
  dispose() {
    this.ex.detach();
    this.term.dispose();
    this.el.remove();
    this.button.remove();
  }
}

/**
 * showNotice adds a notice above the terminals, keeping the newest five.
 * @param {'gap-notice' | 'error-notice' | 'warn-notice' | 'info-notice'} cls
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

/** App holds the client, the tabs, the list and the status line. */
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
    /** A link's token of another identity, waiting for the user's answer. */
    this.offered = /** @type {{token: string, fragment: Fragment} | null} */ (null);
    this.titles = new Titles(localStorage, TITLES_KEY);
    this.copyOnSelect = new Flag(localStorage, COPY_KEY);
    // The link's token is stored (or asked about) before the client asks for one.
    if (fragment.token) this.offerToken(fragment.token, fragment);
    this.client = new TermgateClient({
      // null stops the reconnecting: no token, or the gateway refused it.
      getToken: () => (this.refused ? null : storedToken()),
    });
    this.client.on('status', /** @param {StatusChange} s */ (s) => {
      if (s.state === 'reconnecting' && this.conn.state === 'connecting') this.checkToken();
      this.conn = s;
      this.reconnectAt = s.state === 'reconnecting' ? performance.now() + (s.delay ?? 0) : 0;
      this.render();
    });
    this.client.on('error', /** @param {ErrorInfo} e */ (e) => this.notice(e.message || e.error || ''));
    this.api = new ExecutionsAPI(() => storedToken());
    this.list = new ExecutionList(byId('executions'), {
      api: this.api,
      titleOf: (id) => this.titleOf(id),
      isOpen: (id) => this.tabs.some((t) => t.ex.id === id),
      canWrite: () => canWrite(storedToken() ?? ''),
      attach: (id) => this.open({ id }),
      refused: () => this.refuse(),
    });
    this.searchBar = new SearchBar(byId('search'), () => this.active && {
      search: this.active.search, focus: () => this.active?.term.focus(),
    });
    this.bindControls();
    setInterval(() => this.reconnectAt && this.render(), 250);
    window.addEventListener('resize', debounce(() => this.active?.fitNow(), RESIZE_DEBOUNCE_MS));
    window.addEventListener('hashchange', () => this.follow(readFragment()));
    this.openInitial(fragment);
  }

  /** bindControls wires the bar's buttons, the empty page and the token question. */
  bindControls() {
    byId('new-tab').addEventListener('click', () => this.newShell());
    byId('empty-new').addEventListener('click', () => this.newShell());
    byId('list-toggle').addEventListener('click', () => this.showList(!this.list.shown));
    byId('list-refresh').addEventListener('click', () => this.list.refresh());
    byId('search-toggle').addEventListener('click', () => this.searchBar.toggle());
    const copy = /** @type {HTMLInputElement} */ (byId('copy-on-select'));
    copy.checked = this.copyOnSelect.get();
    copy.addEventListener('change', () => this.copyOnSelect.set(copy.checked));
    byId('token-accept').addEventListener('click', () => this.acceptOffered());
    byId('token-keep').addEventListener('click', () => this.keepStored());
    const form = /** @type {HTMLFormElement} */ (byId('download'));
    const toggle = byId('download-toggle');
    toggle.addEventListener('click', () => {
      form.hidden = !form.hidden;
      toggle.setAttribute('aria-expanded', String(!form.hidden));
      if (!form.hidden) byId('download-path').focus();
    });
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const input = /** @type {HTMLInputElement} */ (byId('download-path'));
      if (this.active?.ex.id && input.value.trim() !== '') this.downloadFile(this.active, input.value.trim());
    });
    const terminals = byId('terminals');
    terminals.addEventListener('dragover', (e) => {
      if (!e.dataTransfer?.types.includes('Files') || !this.active?.ex.id) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'copy';
    });
    terminals.addEventListener('drop', (e) => {
      const files = [...(e.dataTransfer?.files ?? [])];
      if (files.length === 0 || !this.active?.ex.id) return;
      e.preventDefault();
      for (const f of files) this.uploadFile(this.active, f);
    });
  }

  /**
   * downloadFile fetches a file from beside the tab's shell and hands it
   * to the browser to save, telling how it went in a notice.
   * @param {Tab} tab
   * @param {string} path
   */
  downloadFile(tab, path) {
    const name = path.split('/').filter((n) => n !== '').pop() ?? 'download';
    this.api.download(tab.ex.id, path).then((blob) => {
      const a = document.createElement('a');
      a.href = URL.createObjectURL(blob);
      a.download = name;
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
      showNotice('info-notice', `${shown(path, 80)}: downloaded (${blob.size} bytes)`);
    }, (/** @type {Error} */ e) => showNotice('error-notice', `${shown(path, 80)}: not downloaded: ${e.message}`));
  }

  /**
   * uploadFile writes a file dropped on the terminal into the directory
   * its execution started in, telling its progress in one notice.
   * @param {Tab} tab
   * @param {File} file
   */
  uploadFile(tab, file) {
    const n = document.createElement('div');
    n.className = 'upload-notice';
    const tell = (/** @type {string} */ text) => { n.textContent = `${shown(file.name, 80)}: ${text}`; };
    tell('uploading');
    byId('notices').append(n);
    let shownAt = 0;
    this.api.upload(tab.ex.id, file.name, file, (sent) => {
      if (performance.now() - shownAt < 200) return;
      shownAt = performance.now();
      tell(`${Math.floor((sent * 100) / Math.max(file.size, 1))}%`);
    }).then(() => {
      n.dataset.done = 'ok';
      tell(`uploaded (${file.size} bytes) to the directory the shell started in`);
    }, (/** @type {Error} */ e) => {
      n.dataset.done = 'error';
      n.className = 'error-notice';
      tell(`not uploaded: ${e.message}`);
    });
  }

  /** identity is the stored token's identity, which scopes the titles kept. */
  identity() {
    return readClaims(storedToken())?.identity ?? '';
  }

  /**
   * titleOf is the last title this browser saw for an execution.
   * @param {string} id
   */
  titleOf(id) {
    return this.titles.get(this.identity(), id);
  }

  /**
   * offerToken stores a link's token when no token is stored or the
   * stored one is of the same tenant and subject; for another identity it
   * asks first (an attacker's link would otherwise put the page in the
   * attacker's tenant) and the stored token stays meanwhile.
   * @param {string} token
   * @param {Fragment} fragment what else the link asked for
   * @returns {boolean} whether the token was stored
   */
  offerToken(token, fragment) {
    const current = storedToken();
    if (!current || sameIdentity(current, token)) {
      localStorage.setItem(TOKEN_KEY, token);
      return true;
    }
    this.offered = { token, fragment };
    byId('token-current').textContent = whoText(current);
    byId('token-offered').textContent = whoText(token);
    byId('token-confirm').hidden = false;
    return false;
  }

  /**
   * acceptOffered replaces the stored token with the link's and starts
   * the page again in that identity: the tabs of the other are forgotten
   * (their executions keep running in their tenant).
   */
  acceptOffered() {
    const o = this.offered;
    if (!o) return;
    localStorage.setItem(TOKEN_KEY, o.token);
    sessionStorage.removeItem(TABS_KEY);
    const rest = new URLSearchParams();
    if (o.fragment.id) rest.set('id', o.fragment.id);
    if (o.fragment.readOnly) rest.set('readonly', '1');
    const hash = rest.toString();
    history.replaceState(history.state, '', location.pathname + location.search + (hash ? '#' + hash : ''));
    location.reload();
  }

  /** keepStored answers the question with the stored token: the link's is dropped. */
  keepStored() {
    this.offered = null;
    byId('token-confirm').hidden = true;
    byId('token-current').textContent = '';
    byId('token-offered').textContent = '';
  }

  /**
   * follow acts on a fragment set while the page is open (a link into
   * this page, or one typed in the address bar).
   * @param {Fragment} fragment
   */
  follow(fragment) {
    if (fragment.token) {
      const had = storedToken();
      const stored = this.offerToken(fragment.token, fragment);
      // A page without a token, or with a refused one, has stopped
      // connecting: it starts again with the new one.
      if (stored && (!had || this.refused || this.client.status.state === 'closed')) {
        if (fragment.id) history.replaceState(history.state, '', '#id=' + encodeURIComponent(fragment.id));
        location.reload();
        return;
      }
      if (!stored) return; // the question decides
    }
    if (fragment.id) this.open({ id: fragment.id, readOnly: fragment.readOnly });
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
      await this.api.list();
    } catch (err) {
      // Anything but a refusal: the gateway is unreachable or busy, and the client keeps trying.
      if (err instanceof ExecutionsError && err.status === 401) this.refuse();
    } finally {
      this.checking = false;
    }
  }

  /** refuse records that the gateway refused the token. */
  refuse() {
    this.refused = true;
    this.render();
  }

  /** @param {Fragment} fragment */
  openInitial(fragment) {
    if (!storedToken()) {
      this.render();
      return;
    }
    if (fragment.id) {
      this.open({ id: fragment.id, readOnly: fragment.readOnly });
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
    if (!Array.isArray(saved)) saved = [];
    for (const t of saved) if (t && typeof t.id === 'string') this.addTab({ id: t.id, readOnly: !!t.readOnly });
    if (this.tabs.length > 0) {
      this.activate(this.tabs[this.tabs.length - 1]);
      return;
    }
    this.firstShell();
  }

  /**
   * firstShell starts a shell for a page opened afresh, unless shells of
   * the tenant run already: then it shows them to reattach instead of
   * leaving them behind, unseen, and starting one more.
   */
  async firstShell() {
    this.render();
    const list = await this.list.refresh();
    if (this.refused || this.tabs.length > 0) return;
    if (list?.some((r) => r.running && r.pty)) {
      this.showList(true);
      return;
    }
    this.newShell();
  }

  /** newShell starts a shell in a new tab. */
  newShell() {
    if (!storedToken()) return;
    this.activate(this.addTab({}));
  }

  /**
   * open shows execution how.id: its tab when one has it, else a new tab
   * (read-only when the token lacks exec:write).
   * @param {{id: string, readOnly?: boolean}} how
   */
  open(how) {
    const tab = this.tabs.find((t) => t.ex.id === how.id) ?? this.addTab({
      id: how.id, readOnly: how.readOnly || !canWrite(storedToken() ?? ''),
    });
    this.activate(tab);
  }

  /** @param {TabTarget} how */
  addTab(how) {
    const tab = new Tab(this, how);
    this.tabs.push(tab);
    this.list.rerender();
    return tab;
  }

  /** @param {Tab | null} tab */
  activate(tab) {
    this.active = tab;
    for (const t of this.tabs) t.show(t === tab);
    this.render();
    this.renderPorts();
  }

  /**
   * renderPorts shows the ports the active tab's programs listen on, each
   * a button that opens a preview of it in a new window.
   */
  renderPorts() {
    const bar = byId('ports');
    const tab = this.active;
    const ports = tab?.ex.ports ?? [];
    bar.hidden = ports.length === 0;
    const label = document.createElement('span');
    label.textContent = 'Listening:';
    const buttons = ports.map(({ address, port }) => {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'port';
      b.dataset.port = String(port);
      b.textContent = String(port);
      b.title = `Open port ${port} (${address}) in a new window: a preview, which anyone holding its link can open until it expires`;
      b.addEventListener('click', () => this.openPreview(tab, port, b));
      return b;
    });
    bar.replaceChildren(label, ...buttons);
  }

  /**
   * openPreview makes a preview of a port and opens it: the window opens
   * at once (a popup must come from the click), then goes to the URL.
   * @param {Tab | null} tab
   * @param {number} port
   * @param {HTMLButtonElement} button
   */
  openPreview(tab, port, button) {
    if (!tab?.ex.id) return;
    const w = window.open('', '_blank');
    this.api.preview(tab.ex.id, port).then((p) => {
      button.dataset.url = p.url;
      if (w) w.location.href = p.url;
    }, (/** @type {Error} */ e) => {
      w?.close();
      showNotice('error-notice', `port ${port}: ${e.message}`);
    });
  }

  /**
   * closeTab removes a tab; its execution keeps running on the gateway
   * (the list shows it, to reattach or cancel).
   * @param {Tab} tab
   */
  closeTab(tab) {
    const running = !tab.exit && tab.ex.id;
    tab.dispose();
    this.tabs = this.tabs.filter((t) => t !== tab);
    this.saveTabs();
    if (running) showNotice('info-notice', `${tab.ex.id} keeps running: reattach or cancel it under Executions`);
    if (this.active === tab) this.activate(this.tabs[this.tabs.length - 1] ?? null);
    if (this.tabs.length === 0) this.showList(true);
    else if (this.list.shown) this.list.refresh();
  }

  /**
   * replaceTab puts a new shell in the place of an exited tab.
   * @param {Tab} tab
   */
  replaceTab(tab) {
    const next = new Tab(this, {});
    tab.button.after(next.button);
    this.tabs[this.tabs.indexOf(tab)] = next;
    tab.dispose();
    this.saveTabs();
    this.activate(next);
  }

  /** @param {boolean} on */
  showList(on) {
    this.list.show(on);
    byId('list-toggle').setAttribute('aria-expanded', String(on));
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
    const token = storedToken();
    if (!token) return 'no-token';
    if (tab?.exit) return 'exited';
    if (this.conn.state === 'live' && tab?.readOnly) return 'read-only';
    if (this.refused) return expired(token) ? 'expired' : 'refused';
    return this.conn.state === 'closed' ? 'refused' : this.conn.state;
  }

  render() {
    const el = byId('status');
    const state = this.state();
    const exit = this.active?.exit;
    let text = state;
    el.removeAttribute('data-exit-code');
    if (state === 'exited' && exit) { // state() says exited only with an exit
      text = exit.error ? endedText(exit.reason) : exitText(exit);
      el.setAttribute('data-exit-code', String(exit.code));
    } else if (state === 'reconnecting' || state === 'connecting') {
      const secs = Math.max(0, Math.ceil((this.reconnectAt - performance.now()) / 1000));
      text = connectionText(this.conn, secs);
    } else if (state === 'read-only') {
      text = 'live (read-only)';
    } else if (state === 'expired') {
      text = 'token expired: open a new link (the commands keep running)';
    } else if (state === 'refused') {
      text = 'token refused by the gateway: open a new link';
    } else if (state === 'no-token') {
      text = 'no token';
    }
    el.dataset.state = state;
    if (el.textContent !== text) el.textContent = text;
    this.renderEmpty(state);
    const token = storedToken();
    const who = token ? whoText(token) : '';
    const identity = byId('identity');
    if (identity.textContent !== who) identity.textContent = who;
  }

  /**
   * renderEmpty shows the empty page while no tab is open: how to get a
   * token, or how to open a shell.
   * @param {string} state
   */
  renderEmpty(state) {
    const empty = byId('empty');
    empty.hidden = this.tabs.length > 0;
    const text = state === 'no-token' ? NO_TOKEN_TEXT
      : 'No terminal is open here. Start a new shell, or reattach one under Executions.';
    const p = byId('empty-text');
    if (p.textContent !== text) p.textContent = text;
    byId('empty-new').hidden = state === 'no-token';
    byId('new-tab').hidden = state === 'no-token';
  }
}

/**
 * cellsOf reads the newest line of the terminal's buffer that starts with
 * prefix, as [characters, width] per cell (width 0 after a wide character),
 * without the empty cells at its end; [] when none does.
 * @param {Terminal} term
 * @param {string} prefix
 * @returns {[string, number][]}
 */
function cellsOf(term, prefix) {
  const b = term.buffer.active;
  for (let y = b.length - 1; y >= 0; y--) {
    const line = b.getLine(y);
    if (!line || !line.translateToString(true).startsWith(prefix)) continue;
    /** @type {[string, number][]} */
    const out = [];
    for (let x = 0; x < line.length; x++) {
      const c = line.getCell(x);
      if (c) out.push([c.getChars(), c.getWidth()]);
    }
    while (out.length && out[out.length - 1][0] === '' && out[out.length - 1][1] === 1) out.pop();
    return out;
  }
  return [];
}

/**
 * screenOf is what a terminal shows: the visible lines of its active
 * buffer, the cursor, which buffer is active, and its size (rows, columns).
 * @param {Terminal} term
 * @returns {{lines: string[], cursor: [number, number], buffer: string, size: [number, number]}}
 */
function screenOf(term) {
  const b = term.buffer.active;
  const lines = [];
  for (let y = 0; y < term.rows; y++) lines.push(b.getLine(b.viewportY + y)?.translateToString(true) ?? '');
  return { lines, cursor: [b.cursorX, b.cursorY], buffer: b.type, size: [term.rows, term.cols] };
}

const app = new App(readFragment());

if (TESTING) {
  installTestHooks({
    transcript: () => app.active?.transcript?.text() ?? '',
    status: () => byId('status').dataset.state,
    connections: () => app.client.connections,
    execution: () => app.active?.ex.id ?? null,
    replaying: () => !!app.active?.muted,
    tabs: () => app.tabs.map((t) => ({ id: t.ex.id, label: t.labelText(), exited: !!t.exit })),
    cells: (prefix) => (app.active ? cellsOf(app.active.term, prefix) : []),
    selection: () => app.active?.term.getSelection() ?? '',
    screen: () => (app.active ? screenOf(app.active.term) : null),
  });
}
