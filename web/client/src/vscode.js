// vscode.js: a VS Code Pseudoterminal over a termgate execution. The
// object createPseudoterminal returns has exactly the members VS Code's
// Pseudoterminal interface has (onDidWrite, onDidClose, onDidChangeName,
// open, close, handleInput, setDimensions); pass it to
// window.createTerminal({name, pty}). The package does not depend on
// vscode: the extension passes a factory of its event emitters
// (() => new vscode.EventEmitter()).
//
// The terminal follows one execution: started on open, or attached by
// its ID (the one an earlier window kept, say in workspaceState, to
// reattach after a reload: the screen comes back as a snapshot, then the
// output continues with nothing lost or repeated).

/**
 * @template T
 * @typedef {object} EventEmitterLike what a vscode.EventEmitter offers
 * @property {(listener: (e: T) => any) => {dispose(): any}} event
 * @property {(data: T) => void} fire
 * @property {() => void} dispose
 */

/**
 * @typedef {object} PseudoterminalOptions
 * @property {import('./termgate-client.js').TermgateClient} client
 * @property {() => EventEmitterLike<any>} makeEmitter
 * @property {string} [id] an execution to attach to (a reattach); else one is started
 * @property {import('./termgate-client.js').StartOptions} [start] what to start (its pty size is the terminal's)
 * @property {boolean} [cancelOnClose] cancel the execution when the terminal is closed (default: it keeps running, to be attached again)
 * @property {(id: string) => void} [onExecution] told the execution's ID once known: keep it to reattach after a reload
 */

/**
 * @typedef {object} Pseudoterminal
 * @property {(listener: (data: string) => any) => {dispose(): any}} onDidWrite
 * @property {(listener: (code: number | void) => any) => {dispose(): any}} onDidClose
 * @property {(listener: (name: string) => any) => {dispose(): any}} onDidChangeName
 * @property {(initialDimensions: {columns: number, rows: number} | undefined) => void} open
 * @property {() => void} close
 * @property {(data: string) => void} handleInput
 * @property {(dimensions: {columns: number, rows: number}) => void} setDimensions
 */

/** Longest title kept while its end has not arrived. */
const MAX_TITLE = 4096;

/**
 * createPseudoterminal returns a Pseudoterminal that shows a termgate
 * execution in a VS Code terminal.
 * @param {PseudoterminalOptions} opts
 * @returns {Pseudoterminal}
 */
export function createPseudoterminal(opts) {
  const write = opts.makeEmitter();
  const closed = opts.makeEmitter();
  const named = opts.makeEmitter();
  const decoder = new TextDecoder('utf-8');
  const titles = new TitleScanner((t) => named.fire(t));
  /** @type {import('./execution.js').Execution | null} */
  let ex = null;
  let ended = false;
  /** @type {Array<() => void>} */
  const offs = [];

  const end = (/** @type {number | void} */ code) => {
    if (ended) return;
    ended = true;
    const rest = decoder.decode();
    if (rest) write.fire(rest);
    for (const off of offs.splice(0)) off();
    closed.fire(code);
  };

  return {
    onDidWrite: write.event,
    onDidClose: closed.event,
    onDidChangeName: named.event,
    open(dims) {
      const size = dims ? { rows: dims.rows, cols: dims.columns } : { rows: 24, cols: 80 };
      ex = opts.id
        ? opts.client.attach(opts.id, { snapshot: true })
        : opts.client.start({ ...opts.start, pty: size, snapshot: true });
      const e = ex;
      offs.push(
        e.on('attached', (/** @type {{id: string}} */ m) => opts.onExecution?.(m.id)),
        e.on('output', (/** @type {Uint8Array} */ bytes) => {
          const text = decoder.decode(bytes, { stream: true });
          titles.scan(text);
          write.fire(text);
        }),
        e.on('snapshot', (/** @type {{data: string}} */ s) => {
          decoder.decode(); // what was cut off belongs to the history the screen replaces
          write.fire('\x1bc' + s.data);
          titles.scan(s.data);
        }),
        e.on('gap', (/** @type {{bytes: number}} */ g) => write.fire(`\r\n\x1b[2m[termgate: ${g.bytes} bytes of output were lost]\x1b[0m\r\n`)),
        e.on('exit', (/** @type {{code: number}} */ x) => end(x.code)),
        e.on('error', (/** @type {{fatal: boolean, error: string, message: string}} */ err) => {
          if (!err.fatal) return;
          write.fire(`\r\n[termgate: ${err.error}: ${err.message}]\r\n`);
          end(1);
        }),
      );
      if (dims && opts.id) e.resize(dims.rows, dims.columns);
    },
    close() {
      if (!ex || ended) return;
      if (opts.cancelOnClose) ex.cancel();
      else ex.detach();
      ended = true;
      for (const off of offs.splice(0)) off();
    },
    handleInput(data) {
      if (ex && !ended) ex.write(data);
    },
    setDimensions(dims) {
      if (ex && !ended) ex.resize(dims.rows, dims.columns);
    },
  };
}

/**
 * TitleScanner finds the window titles a program sets (OSC 0 and 2) in
 * terminal text, whole across the chunks it arrives in.
 */
export class TitleScanner {
  /** @param {(title: string) => void} onTitle */
  constructor(onTitle) {
    this._onTitle = onTitle;
    /** @type {string | null} the title so far, while its end has not come */
    this._open = null;
    this._tail = '';
  }

  /** @param {string} text */
  scan(text) {
    let s = this._tail + text;
    this._tail = '';
    for (;;) {
      if (this._open !== null) {
        const end = s.search(/\x07|\x1b\\/);
        if (end < 0) {
          if (s.endsWith('\x1b')) { // maybe the start of ST
            this._tail = '\x1b';
            s = s.slice(0, -1);
          }
          this._open = (this._open + s).length > MAX_TITLE ? null : this._open + s;
          return;
        }
        const title = this._open + s.slice(0, end);
        this._open = null;
        this._onTitle(title);
        s = s.slice(end + (s[end] === '\x07' ? 1 : 2));
        continue;
      }
      const m = /\x1b\][02];/.exec(s);
      if (!m) {
        // An introducer cut off at the end waits for the next chunk.
        const cut = s.lastIndexOf('\x1b');
        if (cut >= 0 && s.length - cut < 4) this._tail = s.slice(cut);
        return;
      }
      this._open = '';
      s = s.slice(m.index + m[0].length);
    }
  }
}
