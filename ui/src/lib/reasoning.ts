// Reasoning blocks: a reply from a reasoning model (Qwen3, the DeepSeek-R1
// distills) opens with its thinking between the template's tags
// (`<think>…</think>`); the answer follows the close tag. gpt-oss writes
// Harmony: analysis messages (`<|channel|>analysis<|message|>…<|end|>`)
// are its thinking, and its `final` message is the answer. Pure
// functions, so a reply splits the same way while it streams and once it
// is stored.
import type { ReasoningFormat } from './bindings/ReasoningFormat';

/** The tags assumed when the model's template names none (a remote model,
 *  or no model loaded). */
export const DEFAULT_REASONING: ReasoningFormat = {
  open: '<think>', close: '</think>', switch: null, openedByPrompt: false, answerStart: null, effort: null,
};

/** A reply split into its thinking and its answer. */
export interface ThinkingSplit {
  /** The thinking, without its tags; null when the reply shows no block
   *  (none, or an empty one such as Qwen3's `<think>\n\n</think>` with
   *  thinking off). */
  thinking: string | null;
  /** The close tag has arrived. */
  closed: boolean;
  /** What follows the close tag, leading whitespace trimmed (the whole
   *  reply when it has no block). */
  answer: string;
}

/** The longest end of `text` that begins `tag` (a tag still arriving). */
function partialTagAtEnd(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}

/**
 * Splits `text` into thinking and answer by `format`'s tags (the `<think>`
 * pair when null):
 * 1. whitespace, then the open tag: thinking until the close tag (to the
 *    end when there is none yet);
 * 2. a close tag with no open tag before it, where the prompt opened the
 *    block (`openedByPrompt`, or `thought`: the worker saw the block close):
 *    everything before the close tag; elsewhere a reply that merely
 *    mentions the close tag keeps all its text;
 * 3. `openedByPrompt`, no close tag yet, still streaming: all of it so far;
 * 4. otherwise no thinking.
 * While `streaming`, a tag still arriving (`<thi`) is held back rather than
 * shown as text.
 */
export function splitThinking(text: string, format: ReasoningFormat | null, streaming: boolean, thought = false): ThinkingSplit {
  if (format?.answerStart) return splitHarmony(text, format, streaming);
  const { open, close, openedByPrompt } = format ?? DEFAULT_REASONING;
  const start = text.trimStart();
  let body: string | null = null;
  if (start.startsWith(open)) {
    body = start.slice(open.length);
  } else if (streaming && start.length > 0 && open.startsWith(start)) {
    // The open tag is still arriving.
    return { thinking: null, closed: false, answer: '' };
  } else {
    const c = text.indexOf(close);
    const o = text.indexOf(open);
    if (c >= 0 && (o < 0 || o > c) && (openedByPrompt || thought)) body = text;
    else if (openedByPrompt && streaming && c < 0) body = text;
  }
  if (body === null) return { thinking: null, closed: false, answer: text };

  const c = body.indexOf(close);
  if (c < 0) {
    const shown = streaming ? body.slice(0, body.length - partialTagAtEnd(body, close)) : body;
    return { thinking: shown.trim(), closed: false, answer: '' };
  }
  const thinking = body.slice(0, c).trim();
  const answer = body.slice(c + close.length).trimStart();
  return { thinking: thinking === '' ? null : thinking, closed: true, answer };
}

/** The end of `text` cut where a tag may still be arriving, while streaming. */
function settled(text: string, tags: string[], streaming: boolean): string {
  if (!streaming) return text;
  const cut = Math.max(...tags.map((t) => partialTagAtEnd(text, t)));
  return text.slice(0, text.length - cut);
}

/**
 * A Harmony reply (gpt-oss), as `ReasoningFormat::split` takes it apart in
 * the engine: the analysis messages' text (joined by blank lines) is the
 * thinking, the final message's text the answer; headers and `<|end|>`
 * are markup. A reply with no markup at all is all answer.
 */
function splitHarmony(text: string, format: ReasoningFormat, streaming: boolean): ThinkingSplit {
  const { open, close } = format;
  const answerStart = format.answerStart as string;
  const at = text.indexOf(answerStart);
  const before = at < 0 ? text : text.slice(0, at);
  const analysis: string[] = [];
  let rest = before;
  for (let o = rest.indexOf(open); o >= 0; o = rest.indexOf(open)) {
    const body = rest.slice(o + open.length);
    const end = body.indexOf(close);
    analysis.push((end < 0 ? settled(body, [close, answerStart], streaming) : body.slice(0, end)).trim());
    rest = end < 0 ? '' : body.slice(end);
  }
  const thinking = analysis.length > 0 ? analysis.join('\n\n') : null;
  if (at >= 0) {
    const body = text.slice(at + answerStart.length);
    const end = body.indexOf(close);
    const answer = (end < 0 ? settled(body, [close], streaming) : body.slice(0, end)).trim();
    return { thinking: thinking === '' ? null : thinking, closed: true, answer };
  }
  if (thinking !== null) {
    // Still in the analysis, or between it and the final message's header.
    return { thinking: thinking === '' ? null : thinking, closed: before.includes(close), answer: '' };
  }
  // Nothing yet, or a header still arriving; or text with no Harmony at all.
  if (streaming && (text === '' || text.startsWith('<|') || '<|'.startsWith(text))) {
    return { thinking: null, closed: false, answer: '' };
  }
  return { thinking: null, closed: false, answer: text };
}

/**
 * Follows one streaming reply's text and counts its tokens until the close
 * tag arrives. Fed once per token event, it keeps only the last few
 * characters, so the cost per event does not grow with the reply.
 */
export class ThinkingCounter {
  #tail = '';
  #tokens = 0;
  #closed: number | null = null;

  /** `before`: text the reply already had (continuing a reply). */
  constructor(private close: string, before = '') {
    if (before.includes(close)) this.#closed = 0;
    else this.#tail = before.slice(Math.max(0, before.length - (close.length - 1)));
  }

  /** Feeds one event's text and token count; the tokens up to and
   *  including the close tag, once it has arrived in this event. */
  push(text: string, tokens: number): number | null {
    if (this.#closed !== null) return null;
    this.#tokens += tokens;
    const seen = this.#tail + text;
    if (seen.includes(this.close)) {
      this.#closed = this.#tokens;
      this.#tail = '';
      return this.#closed;
    }
    this.#tail = seen.slice(Math.max(0, seen.length - (this.close.length - 1)));
    return null;
  }

  get closed(): boolean {
    return this.#closed !== null;
  }
}
