/**
 * The one text analysis path of svc, shared by documents (`__svc_text__`) and queries, so the two
 * always agree. Steps, in order:
 *
 * 1. Unicode NFC normalisation (a decomposed "café" and a composed one are the same word), curly
 *    apostrophes (U+2018, U+2019) read as `'`.
 * 2. Word segmentation by `Intl.Segmenter` (granularity `word`, UAX #29 plus ICU's dictionaries for
 *    CJK and Thai); only segments with `isWordLike` are kept, so punctuation, spaces and emoji drop out.
 * 3. Locale-independent lowercasing (`String.prototype.toLowerCase`, never the locale variant, so a
 *    Turkish host does not turn `I` into a dotless `ı`).
 * 4. Stop words: Lucene's default English set (`EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`, 33 words),
 *    the set Anserini's BM25 runs use, so our Cranfield figures compare with theirs.
 * 5. Stemming: English Snowball (Porter2) from the `porter2` npm package, applied to words made only of
 *    ASCII letters, digits and apostrophes. Other words (accented, CJK, ...) are kept as they are: the
 *    English rules would only mangle them.
 * 6. Term id: FNV-1a 32-bit over the UTF-8 bytes of the final term (`termId`). Distinct terms can
 *    collide (2^-32 per pair); BM25 then treats them as one term, which is the accepted cost of
 *    fixed-width ids that clients can compute themselves.
 */
import { stem } from 'porter2';

/** Lucene's EnglishAnalyzer default stop set (also Anserini's default for English). */
export const ENGLISH_STOP_WORDS: ReadonlySet<string> = new Set([
  'a', 'an', 'and', 'are', 'as', 'at', 'be', 'but', 'by', 'for', 'if', 'in', 'into', 'is', 'it', 'no',
  'not', 'of', 'on', 'or', 'such', 'that', 'the', 'their', 'then', 'there', 'these', 'they', 'this',
  'to', 'was', 'will', 'with',
]);

const segmenter = new Intl.Segmenter('en', { granularity: 'word' });
const STEMMABLE = /^[a-z0-9']+$/;
const HAS_LETTER = /[a-z]/;
const CURLY_APOSTROPHES = /[\u2018\u2019]/g;

/** Porter2 stem of a lowercase word; other words (non-ASCII letters) only lose a possessive `'s`. */
export function stemWord(word: string): string {
  // English possessives are dropped for every word, as Lucene's EnglishPossessiveFilter does.
  if (!STEMMABLE.test(word) || !HAS_LETTER.test(word)) return word.replace(/'s$/, '');
  const s = stem(word);
  // The stemmer can leave a lone apostrophe or an empty string for inputs like "'s".
  return s.replace(/^'+|'+$/g, '');
}

/** Analysed terms of a text, in order, repeats kept: segmented, lowercased, stop words removed, stemmed. */
export function tokenize(text: string): string[] {
  const out: string[] = [];
  const normalised = text.normalize('NFC').replace(CURLY_APOSTROPHES, "'");
  for (const word of words(normalised)) {
    const lower = word.toLowerCase();
    if (ENGLISH_STOP_WORDS.has(lower)) continue;
    const term = stemWord(lower);
    if (term.length === 0) continue;
    out.push(term);
  }
  return out;
}

/**
 * The word-like segments of `text`, as Intl.Segmenter finds them. Two shortcuts keep this linear and
 * fast (V8's segment iterator costs tens of microseconds a call and grows worse than linearly with the
 * string): whitespace is always a word boundary, so the text is cut there first; a piece of printable
 * ASCII is scanned by `asciiWords`, which applies the same UAX #29 rules restricted to ASCII (a test
 * checks it against Intl.Segmenter); any other piece goes to the segmenter.
 */
export function words(text: string): string[] {
  const out: string[] = [];
  for (const piece of text.split(/\s+/)) {
    if (piece.length === 0) continue;
    if (PRINTABLE_ASCII.test(piece)) {
      asciiWords(piece, out);
      continue;
    }
    for (const seg of segmenter.segment(piece)) if (seg.isWordLike) out.push(seg.segment);
  }
  return out;
}

const PRINTABLE_ASCII = /^[\x21-\x7e]+$/;

const enum Cls {
  Other,
  Letter,
  Digit,
  Under, // ExtendNumLet
  MidLetter, // ':' (MidLetter) -- joins letters only
  MidNumLet, // '.' and "'" -- join letters or digits
  MidNum, // ',' and ';' -- join digits only
}

function cls(c: number): Cls {
  if ((c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a)) return Cls.Letter;
  if (c >= 0x30 && c <= 0x39) return Cls.Digit;
  if (c === 0x5f) return Cls.Under;
  if (c === 0x2e || c === 0x27) return Cls.MidNumLet;
  if (c === 0x2c || c === 0x3b) return Cls.MidNum;
  if (c === 0x3a) return Cls.MidLetter;
  return Cls.Other;
}

/** UAX #29 word segmentation of a printable-ASCII string, keeping the word-like segments. */
export function asciiWords(s: string, out: string[]): void {
  let i = 0;
  const n = s.length;
  while (i < n) {
    const c0 = cls(s.charCodeAt(i));
    if (c0 !== Cls.Letter && c0 !== Cls.Digit && c0 !== Cls.Under) {
      i++;
      continue;
    }
    const start = i;
    let prev = c0;
    i++;
    while (i < n) {
      const c = cls(s.charCodeAt(i));
      if (c === Cls.Letter || c === Cls.Digit || c === Cls.Under) {
        prev = c;
        i++;
        continue;
      }
      // WB6/7 (letter mid letter) and WB11/12 (digit mid digit): a single middle char between two of a kind.
      if (i + 1 < n && (c === Cls.MidLetter || c === Cls.MidNumLet || c === Cls.MidNum)) {
        const next = cls(s.charCodeAt(i + 1));
        const joinsLetters = prev === Cls.Letter && next === Cls.Letter && c !== Cls.MidNum;
        const joinsDigits = prev === Cls.Digit && next === Cls.Digit && c !== Cls.MidLetter;
        if (joinsLetters || joinsDigits) {
          i += 2;
          prev = next;
          continue;
        }
      }
      break;
    }
    // ICU reports a lone underscore as not word-like, but a longer run of them as word-like.
    if (c0 !== Cls.Under || i - start > 1 || prev !== Cls.Under) out.push(s.slice(start, i));
  }
}

/** FNV-1a 32-bit hash of the UTF-8 bytes of `term`, as an unsigned integer. */
export function termId(term: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < term.length; i++) {
    let c = term.codePointAt(i) as number;
    if (c > 0xffff) i++; // a surrogate pair is one code point
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd; // a lone surrogate encodes as U+FFFD, as TextEncoder does
    if (c < 0x80) {
      h = fnvByte(h, c);
    } else if (c < 0x800) {
      h = fnvByte(h, 0xc0 | (c >> 6));
      h = fnvByte(h, 0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      h = fnvByte(h, 0xe0 | (c >> 12));
      h = fnvByte(h, 0x80 | ((c >> 6) & 0x3f));
      h = fnvByte(h, 0x80 | (c & 0x3f));
    } else {
      h = fnvByte(h, 0xf0 | (c >> 18));
      h = fnvByte(h, 0x80 | ((c >> 12) & 0x3f));
      h = fnvByte(h, 0x80 | ((c >> 6) & 0x3f));
      h = fnvByte(h, 0x80 | (c & 0x3f));
    }
  }
  return h >>> 0;
}

function fnvByte(h: number, byte: number): number {
  return Math.imul(h ^ byte, 0x01000193);
}

/** Term id -> number of occurrences in `text`. */
export function termFrequencies(text: string): Map<number, number> {
  const tf = new Map<number, number>();
  for (const t of tokenize(text)) {
    const id = termId(t);
    tf.set(id, (tf.get(id) ?? 0) + 1);
  }
  return tf;
}

/** A text as a sparse term-frequency vector: ids ascending, parallel weights, and its token count. */
export interface TextVector {
  terms: Uint32Array;
  weights: Float32Array;
  /** Number of analysed tokens (after stop words): the document length BM25 normalises by. */
  length: number;
}

export function textVector(text: string): TextVector {
  const tf = termFrequencies(text);
  const terms = Uint32Array.from(tf.keys()).sort();
  const weights = new Float32Array(terms.length);
  let length = 0;
  for (let i = 0; i < terms.length; i++) {
    const n = tf.get(terms[i]) as number;
    weights[i] = n;
    length += n;
  }
  return { terms, weights, length };
}

/**
 * Query side: the term ids of a query text, repeats kept (BM25 weights a term by how often the query
 * says it, as Anserini's bag-of-words queries do). The caller bounds the number of distinct terms
 * by SVC_MAX_SPARSE_TERMS with `distinctCount`.
 */
export function queryTermIds(text: string): Uint32Array {
  return Uint32Array.from(tokenize(text), termId);
}

/** Number of distinct values in a term id list (for the SVC_MAX_SPARSE_TERMS check of a query). */
export function distinctCount(ids: ArrayLike<number>): number {
  return new Set(Array.from(ids)).size;
}
