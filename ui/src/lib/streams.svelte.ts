// Replies being written and replays being run, by conversation: each
// conversation's generation events routed into its state, and tokens handed
// to the page at most once a frame. The one place a stream starts.
import { asAppError, type OnEvent } from './api';
import type { GenerationEvent } from './bindings/GenerationEvent';
import type { ReplayOutcome } from './bindings/ReplayOutcome';
import { DEFAULT_REASONING, ThinkingCounter } from './reasoning';

/** One reply's thinking as it streams: when its first token came
 *  (`performance.now()`), and once the close tag has arrived, how many
 *  tokens it took and how long. */
export interface StreamThinking {
  firstTokenAt: number | null;
  thought: { tokens: number; ms: number } | null;
}

/** One of the replies written beside the first ("Generate N"). */
export interface StreamVariant extends StreamThinking {
  replyId: number;
  text: string;
  tokens: number;
}

/** A reply being written, in any conversation. */
export interface Stream extends StreamThinking {
  replyId: number;
  text: string;
  /** Position in the queue while waiting; 0 once started. */
  queuePosition: number;
  started: boolean;
  tokens: number;
  /** How far the prompt has been read, once the reply has started. */
  prefill: { done: number; total: number } | null;
  /** The other replies written beside this one ("Generate N"), in order. */
  variants: StreamVariant[];
  /** The tool call waiting for the user's approval, by its id. */
  awaiting: string | null;
}

/** A recorded reply being run again (or the result of the last run), in
 *  one conversation. */
export interface Replay {
  replyId: number;
  /** Tokens produced so far, and how many the reply recorded. */
  tokens: number;
  recorded: number;
  done: boolean;
  outcome: ReplayOutcome | null;
  error: string | null;
}

/** The shortest time between two updates of a streaming reply. */
export const FRAME_MS = 100;

export class StreamStore {
  byConversation = $state<Record<number, Stream>>({});
  replays = $state<Record<number, Replay>>({});

  /** `closeTag`: the tag that ends a reply's thinking in a conversation
   *  (its model's template's), so the stream can count thinking tokens. */
  constructor(private closeTag: (conversationId: number) => string = () => DEFAULT_REASONING.close) {}

  /** A reply or a replay is running in the conversation. */
  busy(conversationId: number): boolean {
    const r = this.replays[conversationId];
    return !!this.byConversation[conversationId] || (!!r && !r.done);
  }

  /** Opens the conversation's stream, then runs `call` (a command that
   *  starts the reply) with the listener for its events; the stream closes
   *  again if the call fails. `ended` runs once the reply has ended, with
   *  its error if it failed. Events may arrive before `call` returns, so
   *  the stream exists first. */
  async start<T>(
    conversationId: number,
    init: { replyId?: number; text?: string; variants?: number },
    call: (onEvent: OnEvent) => Promise<T>,
    ended: (error: string | null) => void,
    progress: (notice?: string) => void = () => {},
  ): Promise<T> {
    const variants = init.variants ?? 1;
    this.byConversation[conversationId] = {
      replyId: init.replyId ?? -1, text: init.text ?? '', queuePosition: 0, started: false, tokens: 0, prefill: null,
      firstTokenAt: null, thought: null, awaiting: null,
      variants: Array.from({ length: variants - 1 }, () => ({ replyId: -1, text: '', tokens: 0, firstTokenAt: null, thought: null })),
    };
    const close = this.closeTag(conversationId);
    this.thinking.set(conversationId, Array.from({ length: variants }, (_, i) => ({ counter: new ThinkingCounter(close, i === 0 ? (init.text ?? '') : ''), firstAt: null })));
    try {
      return await call(this.listener(conversationId, ended, progress));
    } catch (e) {
      delete this.byConversation[conversationId];
      this.thinking.delete(conversationId);
      throw e;
    }
  }

  /** Runs a replay of `replyId` through `call`; `replays` follows it. */
  async replay(conversationId: number, replyId: number, recorded: number, call: (onEvent: OnEvent) => Promise<void>) {
    // One at a time: a second would take over the first one's place.
    if (this.busy(conversationId)) return;
    this.replays[conversationId] = { replyId, tokens: 0, recorded, done: false, outcome: null, error: null };
    const r = this.replays[conversationId];
    try {
      await call((event) => {
        switch (event.event) {
          case 'tokens':
            r.tokens += event.data.ids.length;
            break;
          case 'replayed':
            r.done = true;
            r.outcome = event.data.outcome;
            break;
          case 'error':
            r.done = true;
            r.error = event.data.error.message;
            break;
        }
      });
    } catch (e) {
      r.done = true;
      r.error = asAppError(e).message;
    }
  }

  forget(conversationId: number) {
    delete this.byConversation[conversationId];
    this.thinking.delete(conversationId);
    delete this.replays[conversationId];
  }

  /** `progress`: the conversation changed mid-stream (a reply ended in
   *  tool calls, a call changed, the reply reading their results began),
   *  or, with a notice, something the user should know (a server left out). */
  private listener(conversationId: number, ended: (error: string | null) => void, progress: (notice?: string) => void): OnEvent {
    return (event: GenerationEvent) => {
      const s = this.byConversation[conversationId];
      switch (event.event) {
        case 'queued':
          if (s) s.queuePosition = event.data.position;
          break;
        case 'started':
          if (s) {
            if (s.replyId !== event.data.replyId && s.variants.length === 0 && s.tokens === 0) {
              // A reply not known yet: the first one, or the one after tool
              // calls, a new message to stream into.
              Object.assign(s, { text: '', tokens: 0, prefill: null, firstTokenAt: null, thought: null });
              this.thinking.set(conversationId, [{ counter: new ThinkingCounter(this.closeTag(conversationId), ''), firstAt: null }]);
              progress();
            }
            s.replyId = event.data.replyId;
            s.started = true;
            s.queuePosition = 0;
          }
          break;
        case 'toolsUnavailable':
          // A chat's server that cannot start: the reply goes on without it.
          progress(`Tools left out of this reply: ${event.data.errors.join('; ')}`);
          break;
        case 'toolCall':
          if (s) {
            if (event.data.awaitingApproval) s.awaiting = event.data.call.callId;
            else if (s.awaiting === event.data.call.callId) s.awaiting = null;
          }
          progress();
          break;
        case 'prefill':
          if (s) s.prefill = { done: event.data.done, total: event.data.total };
          break;
        case 'tokens':
          if (s) this.queueTokens(conversationId, event.data.variant, event.data.text, event.data.ids.length);
          break;
        case 'finished':
          if (event.data.toolCalls?.length) {
            // The reply ended in calls: they run next, then another reply.
            this.flushTokens();
            if (s) Object.assign(s, { replyId: -1, text: '', tokens: 0, started: false, prefill: null });
            progress();
            break;
          }
        // falls through
        case 'error':
          this.flushTokens();
          delete this.byConversation[conversationId];
          this.thinking.delete(conversationId);
          ended(event.event === 'error' ? event.data.error.message : null);
          break;
      }
    };
  }

  /** Tokens received but not yet shown, by conversation and variant. They
   *  reach the page in an animation frame at most every `FRAME_MS`, however
   *  fast they arrive: each update costs the webview a layout and a paint,
   *  and on a machine with few cores that time comes out of the model's. */
  private pendingTokens = new Map<number, Map<number, Pending>>();
  /** Each running reply's thinking, by conversation and variant: counted
   *  per event, outside the page's state. */
  private thinking = new Map<number, { counter: ThinkingCounter; firstAt: number | null }[]>();
  private flushQueued = false;
  private lastFlush = 0;

  private flushTokens = () => {
    this.flushQueued = false;
    this.lastFlush = performance.now();
    for (const [id, byVariant] of this.pendingTokens) {
      const s = this.byConversation[id];
      if (!s) continue;
      for (const [variant, p] of byVariant) {
        const target = variant === 0 ? s : s.variants[variant - 1];
        if (!target) continue;
        target.text += p.text;
        target.tokens += p.tokens;
        if (target.firstTokenAt === null && p.firstAt !== null) target.firstTokenAt = p.firstAt;
        if (p.thought) target.thought = p.thought;
      }
    }
    this.pendingTokens.clear();
  };

  private queueTokens(conversationId: number, variant: number, text: string, tokens: number) {
    let byVariant = this.pendingTokens.get(conversationId);
    if (!byVariant) this.pendingTokens.set(conversationId, (byVariant = new Map()));
    let p = byVariant.get(variant);
    if (p) {
      p.text += text;
      p.tokens += tokens;
    } else {
      byVariant.set(variant, (p = { text, tokens, firstAt: null, thought: null }));
    }
    const t = this.thinking.get(conversationId)?.[variant];
    if (t) {
      const now = performance.now();
      if (t.firstAt === null) p.firstAt = t.firstAt = now;
      const thought = t.counter.push(text, tokens);
      if (thought !== null) p.thought = { tokens: thought, ms: now - t.firstAt };
    }
    if (this.flushQueued) return;
    this.flushQueued = true;
    const wait = Math.max(0, this.lastFlush + FRAME_MS - performance.now());
    const inFrame = () => (typeof requestAnimationFrame === 'function' ? requestAnimationFrame(this.flushTokens) : setTimeout(this.flushTokens, 0));
    if (wait > 0) setTimeout(inFrame, wait);
    else inFrame();
  }
}

/** Tokens of one reply received but not yet shown. */
interface Pending {
  text: string;
  tokens: number;
  /** When the reply's first token came, if it is among these. */
  firstAt: number | null;
  /** The thinking, if it closed among these. */
  thought: { tokens: number; ms: number } | null;
}
