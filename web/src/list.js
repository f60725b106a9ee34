// list.js: the panel that lists the tenant's executions (GET
// /v1/executions) so a shell whose tab was closed, or that another page
// started, can be reattached or cancelled. Everything shown is text
// (textContent): IDs and titles come from outside.

import { ExecutionsError, partialText, rows } from './executions.js';

/** How often an open list asks the gateway again. */
const REFRESH_MS = 5000;

/** When the list asks again after a cancel: the execution ends shortly after SIGTERM. */
const AFTER_CANCEL_MS = [300, 1500];

/**
 * @typedef {import('./executions.js').ExecutionsAPI} ExecutionsAPI
 * @typedef {import('./executions.js').Row} Row
 */

/**
 * @typedef {object} ListOptions what the list needs from the page
 * @property {ExecutionsAPI} api
 * @property {(id: string) => string} titleOf a title this browser saw for id
 * @property {(id: string) => boolean} isOpen whether a tab shows id
 * @property {() => boolean} canWrite whether the token may cancel
 * @property {(id: string) => void} attach opens id in a tab (or shows its tab)
 * @property {(err: unknown) => void} refused the gateway refused the token (401)
 */

/** ExecutionList is the list panel (#executions in index.html). */
export class ExecutionList {
  /**
   * @param {HTMLElement} el the panel
   * @param {ListOptions} opts
   */
  constructor(el, opts) {
    this.el = el;
    this.opts = opts;
    this.body = /** @type {HTMLElement} */ (el.querySelector('tbody'));
    this.empty = /** @type {HTMLElement} */ (el.querySelector('.list-empty'));
    this.error = /** @type {HTMLElement} */ (el.querySelector('.list-error'));
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this.timer = undefined;
    /** Counts refreshes, so a slow answer never overwrites a newer one. */
    this.generation = 0;
    /** @type {Row[]} */
    this.rows = [];
  }

  /** Whether the panel is shown. */
  get shown() {
    return !this.el.hidden;
  }

  /**
   * show shows or hides the panel; a shown one refreshes every REFRESH_MS.
   * @param {boolean} on
   */
  show(on) {
    this.el.hidden = !on;
    clearInterval(this.timer);
    this.timer = undefined;
    if (on) {
      this.timer = setInterval(() => this.refresh(), REFRESH_MS);
      this.refresh();
    }
  }

  /**
   * refresh asks the gateway for the list and shows it; it returns the
   * rows shown, or null when the gateway could not answer.
   * @returns {Promise<Row[] | null>}
   */
  async refresh() {
    const gen = ++this.generation;
    try {
      const page = await this.opts.api.listPage();
      const list = rows(page.executions, this.opts.titleOf);
      if (gen === this.generation) this.render(list, partialText(page.unreachable));
      return list;
    } catch (err) {
      if (err instanceof ExecutionsError && err.status === 401) this.opts.refused(err);
      if (gen === this.generation) this.render(this.rows, `The list could not be read: ${err instanceof Error ? err.message : String(err)}`);
      return null;
    }
  }

  /**
   * @param {Row[]} list
   * @param {string} error
   */
  render(list, error) {
    this.rows = list;
    this.body.replaceChildren(...list.map((r) => this.row(r)));
    this.empty.hidden = list.length > 0 || error !== '';
    this.error.hidden = error === '';
    this.error.textContent = error;
  }

  /** rerender shows the rows again (a tab opened or closed). */
  rerender() {
    this.render(this.rows, this.error.textContent ?? '');
  }

  /**
   * @param {Row} r
   * @returns {HTMLTableRowElement}
   */
  row(r) {
    const tr = document.createElement('tr');
    tr.dataset.id = r.id;
    tr.dataset.status = r.status;
    for (const [cls, text] of [['id', r.id], ['title', r.title], ['status', r.status], ['started', r.started]]) {
      const td = document.createElement('td');
      td.className = cls;
      td.textContent = text;
      if (cls === 'title' || cls === 'id') td.title = text;
      tr.append(td);
    }
    const actions = document.createElement('td');
    actions.className = 'actions';
    const open = this.opts.isOpen(r.id);
    const attach = button('attach', open ? 'Show' : this.opts.canWrite() ? 'Attach' : 'Watch',
      open ? 'Show its tab' : 'Open it in a tab', () => this.opts.attach(r.id));
    attach.disabled = !r.running && !open;
    actions.append(attach);
    if (r.recorded) {
      const rec = button('recording', 'Recording', 'Download its recording (asciicast v2; asciinema play plays it)', () => this.download(r.id, rec));
      actions.append(rec);
    }
    if (r.running && this.opts.canWrite()) {
      const cancel = button('cancel', 'Cancel', 'Stop it (SIGTERM, then it ends as cancelled)', () => this.cancel(r.id, cancel));
      actions.append(cancel);
    }
    tr.append(actions);
    return tr;
  }

  /**
   * download saves an execution's recording as ID.cast: fetched with the
   * token (a plain link cannot carry it), then handed to the browser.
   * @param {string} id
   * @param {HTMLButtonElement} b
   */
  async download(id, b) {
    b.disabled = true;
    try {
      const blob = await this.opts.api.recording(id);
      const url = URL.createObjectURL(blob);
      const a = document.createElement('a');
      a.href = url;
      a.download = `${id}.cast`;
      a.hidden = true;
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (err) {
      this.render(this.rows, `The recording of ${id} could not be read: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      b.disabled = false;
    }
  }

  /**
   * @param {string} id
   * @param {HTMLButtonElement} b
   */
  async cancel(id, b) {
    b.disabled = true;
    try {
      await this.opts.api.cancel(id);
    } catch (err) {
      // not_running: it ended meanwhile, which the refresh shows.
      if (!(err instanceof ExecutionsError && err.code === 'not_running')) {
        this.render(this.rows, `${id} could not be cancelled: ${err instanceof Error ? err.message : String(err)}`);
        return;
      }
    }
    this.refresh();
    for (const ms of AFTER_CANCEL_MS) setTimeout(() => this.shown && this.refresh(), ms);
  }
}

/**
 * @param {string} cls
 * @param {string} text
 * @param {string} title
 * @param {() => void} onClick
 * @returns {HTMLButtonElement}
 */
function button(cls, text, title, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = cls;
  b.textContent = text;
  b.title = title;
  b.addEventListener('click', onClick);
  return b;
}
