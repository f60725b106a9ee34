// prefs.js: what the page keeps in the browser's storage besides the
// token: the viewer's options and the titles terminals had, so the list
// of executions can name a shell whose tab was closed.

/**
 * @typedef {Pick<Storage, 'getItem' | 'setItem' | 'removeItem'>} Store the
 *   part of Storage used (tests pass a Map-backed one)
 */

/** TITLES_MAX is how many titles are kept: the newest. */
export const TITLES_MAX = 100;

/** Longest title kept. */
const TITLE_CHARS = 200;

/** Flag is a boolean option kept in storage under one key. */
export class Flag {
  /**
   * @param {Store} store
   * @param {string} key
   */
  constructor(store, key) {
    this.store = store;
    this.key = key;
  }

  /** @returns {boolean} */
  get() {
    return this.store.getItem(this.key) === '1';
  }

  /** @param {boolean} on */
  set(on) {
    if (on) this.store.setItem(this.key, '1');
    else this.store.removeItem(this.key);
  }
}

/**
 * Titles remembers the last title of each execution per identity (IDs
 * are per tenant), at most TITLES_MAX of them: the least recently set go.
 */
export class Titles {
  /**
   * @param {Store} store
   * @param {string} key
   */
  constructor(store, key) {
    this.store = store;
    this.key = key;
  }

  /** @returns {[string, string][]} [scope + id, title], oldest first */
  load() {
    try {
      const v = JSON.parse(this.store.getItem(this.key) ?? '[]');
      return Array.isArray(v) ? v.filter((e) => Array.isArray(e) && e.length === 2 && e.every((s) => typeof s === 'string')) : [];
    } catch {
      return [];
    }
  }

  /**
   * get returns the title kept for id under scope, or ''.
   * @param {string} scope whose IDs (the token's identity)
   * @param {string} id
   */
  get(scope, id) {
    const k = scope + '\n' + id;
    return this.load().find(([key]) => key === k)?.[1] ?? '';
  }

  /**
   * set keeps title for id under scope (an empty title forgets it).
   * @param {string} scope
   * @param {string} id
   * @param {string} title
   */
  set(scope, id, title) {
    const k = scope + '\n' + id;
    const all = this.load().filter(([key]) => key !== k);
    if (title) all.push([k, title.slice(0, TITLE_CHARS)]);
    try {
      this.store.setItem(this.key, JSON.stringify(all.slice(-TITLES_MAX)));
    } catch {
      // Storage full or off: titles are a convenience.
    }
  }
}
