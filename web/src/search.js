// search.js: the search bar over the active terminal's scrollback
// (@xterm/addon-search). Enter finds the next match, Shift+Enter the
// previous, Escape closes the bar; typing searches as one types.

/**
 * @typedef {import('@xterm/addon-search').SearchAddon} SearchAddon
 * @typedef {import('@xterm/addon-search').ISearchOptions} ISearchOptions
 */

/** How matches are marked: every match, and the one selected. */
export const SEARCH_OPTIONS = /** @type {ISearchOptions} */ ({
  decorations: {
    matchBackground: '#515c6a', matchOverviewRuler: '#888888',
    activeMatchBackground: '#a0752a', activeMatchColorOverviewRuler: '#ffb74d',
  },
});

/**
 * @typedef {object} SearchTarget the terminal searched
 * @property {SearchAddon} search
 * @property {() => void} focus gives the keyboard back to the terminal
 */

/** SearchBar is the #search bar of index.html. */
export class SearchBar {
  /**
   * @param {HTMLElement} el the bar, holding the input and buttons
   * @param {() => SearchTarget | null} target the active terminal
   */
  constructor(el, target) {
    this.el = el;
    this.target = target;
    this.input = /** @type {HTMLInputElement} */ (el.querySelector('input'));
    this.count = /** @type {HTMLElement} */ (el.querySelector('.count'));
    /** Whether a find runs: the selection it makes is the match's. */
    this.finding = false;
    this.input.addEventListener('input', () => this.find(true, true));
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        this.find(!e.shiftKey, false);
      } else if (e.key === 'Escape') {
        e.preventDefault();
        this.close();
      }
    });
    el.querySelector('.next')?.addEventListener('click', () => this.find(true, false));
    el.querySelector('.prev')?.addEventListener('click', () => this.find(false, false));
    el.querySelector('.close')?.addEventListener('click', () => this.close());
  }

  /** open shows the bar with its text selected, ready to type. */
  open() {
    this.el.hidden = false;
    this.input.focus();
    this.input.select();
  }

  /** toggle opens a closed bar and closes an open one. */
  toggle() {
    if (this.el.hidden) this.open();
    else this.close();
  }

  /** close hides the bar, clears the marks and gives the keys back to the terminal. */
  close() {
    this.el.hidden = true;
    this.count.textContent = '';
    const t = this.target();
    t?.search.clearDecorations();
    t?.focus();
  }

  /**
   * find selects the next (or previous) match of the input's text.
   * @param {boolean} forward
   * @param {boolean} incremental as one types: the current match may grow
   */
  find(forward, incremental) {
    const t = this.target();
    const text = this.input.value;
    if (!t) return;
    if (!text) {
      t.search.clearDecorations();
      this.count.textContent = '';
      return;
    }
    const opts = { ...SEARCH_OPTIONS, incremental };
    this.finding = true;
    let found;
    try {
      found = forward ? t.search.findNext(text, opts) : t.search.findPrevious(text, opts);
    } finally {
      this.finding = false;
    }
    if (!found) this.count.textContent = 'no match';
  }

  /**
   * results shows what the addon reports for the active terminal.
   * @param {{resultIndex: number, resultCount: number}} r
   */
  results(r) {
    if (this.el.hidden) return;
    if (r.resultCount === 0) this.count.textContent = 'no match';
    else if (r.resultIndex < 0) this.count.textContent = `${r.resultCount}+ matches`;
    else this.count.textContent = `${r.resultIndex + 1} of ${r.resultCount}`;
  }
}
