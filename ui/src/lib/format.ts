// Words for what the engine reports.
import type { DraftStats } from './bindings/DraftStats';
import type { ImportResult } from './bindings/ImportResult';
import type { ReplyStats } from './bindings/ReplyStats';
import type { RequestCache } from './bindings/RequestCache';
import type { Replay } from './streams.svelte';

export function finishInWords(reason: string, error?: string | null): string {
  switch (reason) {
    case 'end_token':
      return 'finished';
    case 'max_tokens':
      return 'stopped: reply length limit';
    case 'cache_full':
      return 'stopped: context full';
    case 'stop_string':
      return 'stopped: stop string';
    case 'cancelled':
      return 'stopped by you';
    case 'interrupted':
      return 'interrupted: Hearth closed while writing';
    case 'error':
      return error ? `failed: ${error}` : 'failed';
    default:
      return reason;
  }
}

export function statsInWords(s: ReplyStats): string[] {
  const parts: string[] = [];
  if (s.promptTokens > 0) {
    parts.push(`prompt ${s.promptTokens} tok`);
    parts.push(`processed ${s.processedTokens} this turn`);
  }
  if (s.generatedTokens > 0) {
    parts.push(`first token ${Math.round(s.ttftMs)} ms`);
    parts.push(`${s.tokensPerS.toFixed(1)} tok/s`);
  }
  const drafts = s.drafts ? draftsInWords(s.drafts) : '';
  if (drafts) parts.push(drafts);
  if (s.seed !== null && s.seed !== undefined) parts.push(`seed ${s.seed}`);
  if (s.temperature !== null && s.temperature !== undefined) parts.push(`temp ${+s.temperature.toFixed(3)}`);
  if (s.droppedMessages) parts.push(`left out ${s.droppedMessages} earlier messages`);
  parts.push(finishInWords(s.finishReason, s.error));
  return parts;
}

/** How many of a reply's drafted tokens its verify passes took; '' when
 *  none were drafted (speculation on, but nothing in the text to draft from). */
export function draftsInWords(d: DraftStats): string {
  if (d.drafted <= 0) return '';
  return `drafts: ${d.accepted} of ${d.drafted} taken (${Math.round((100 * d.accepted) / d.drafted)}%)`;
}

export function titleOf(title: string): string {
  return title.trim() === '' ? 'New chat' : title;
}

/** Prompts shorter than this are read too fast to be worth counting. */
export const PREFILL_SHOWN_FROM = 512;

/** What a reply with no text yet is waiting for; '' once there is nothing to say. */
export function waitingInWords(s: {
  tokens: number;
  queuePosition: number;
  started: boolean;
  prefill: { done: number; total: number } | null;
}): string {
  if (s.tokens > 0) return '';
  if (s.queuePosition > 0) return `Waiting for other chats (position ${s.queuePosition})…`;
  if (!s.started) return 'Reading the conversation…';
  const p = s.prefill;
  if (!p || p.done >= p.total) return '';
  if (p.total < PREFILL_SHOWN_FROM) return 'Reading the conversation…';
  return `Reading the conversation… ${p.done.toLocaleString('en-US')} / ${p.total.toLocaleString('en-US')} tokens`;
}

/** A replay's progress or verdict, in words. */
export function replayInWords(r: Replay): string {
  if (r.error) return `Replay failed: ${r.error}`;
  if (!r.done) return `Replaying… ${r.tokens}/${r.recorded} tokens`;
  const o = r.outcome;
  if (!o) return '';
  const notes = o.notes.length ? ` (${o.notes.join('; ')})` : '';
  const ran = o.processedTokens ? `, ${o.processedTokens} prompt tokens run` : '';
  if (o.stopped) return `Replay stopped after ${o.compared} of ${o.recorded} tokens`;
  if (o.matched) return `Replay matched all ${o.recorded} tokens${ran}${notes}`;
  return `Replay differs from token ${(o.firstDifference ?? 0) + 1} of ${o.recorded}${notes}`;
}

/** A reasoning block's summary: live while it is being written, then how
 *  long it took and how many tokens. */
export function thinkingInWords(t: {
  /** Still being written. */
  live: boolean;
  /** The close tag arrived. */
  closed: boolean;
  tokens: number | null;
  /** The thinking's duration, or while live the time since it began. */
  ms: number | null;
}): string {
  const tokens = t.tokens !== null ? ` · ${t.tokens.toLocaleString('en-US')} token${t.tokens === 1 ? '' : 's'}` : '';
  if (t.live && !t.closed) return `Thinking… ${Math.floor((t.ms ?? 0) / 1000)} s${tokens}`;
  if (!t.closed) return `Thinking (stopped before an answer)${tokens}`;
  if (t.ms === null) return `Thought${tokens}`;
  return `Thought for ${(t.ms / 1000).toFixed(1)} s${tokens}`;
}

/** What an import did, in words. */
export function importInWords(r: ImportResult): string {
  const n = r.conversationIds.length;
  let words = n === 0 ? 'Nothing new to import' : `Imported ${n} conversation${n === 1 ? '' : 's'}`;
  if (r.skippedDuplicates > 0) words += ` (already here: ${r.skippedDuplicates} skipped)`;
  if (r.cache === 'restored') words += ' — cache restored: the next turn reads only your new message';
  else if (r.cache === 'skipped') words += ` — text imported; cache skipped: ${r.cacheNote ?? 'it does not fit this model'}`;
  return words;
}

/** A file name for a conversation titled `title`: no path separators,
 *  reserved or control characters, at most 80 characters. */
export function fileNameOf(title: string, extension: string): string {
  const base = title
    .replace(/[\\/:*?"<>|\u0000-\u001f\u007f]+/g, ' ')
    .replace(/\s+/g, ' ')
    .trim()
    .slice(0, 80)
    .replace(/^[.\s]+|[.\s]+$/g, '');
  return `${base || 'conversation'}.${extension}`;
}

/** The default name of a backup made on `date` (local time). */
export function backupFileName(date: Date): string {
  const two = (n: number) => String(n).padStart(2, '0');
  return `hearth-backup-${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())}.json`;
}

/** An API client's cache: "3,412 tokens · 41.2 MB · used 12 s ago", its
 *  age counted from `nowMs` (the caller's clock, so tests give their own). */
export function requestCacheInWords(c: RequestCache, nowMs: number): string {
  const seconds = Math.max(0, Math.round((nowMs - c.lastUsedMs) / 1000));
  const age =
    seconds < 60 ? `${seconds} s` : seconds < 3600 ? `${Math.floor(seconds / 60)} min` : `${Math.floor(seconds / 3600)} h`;
  const tokens = `${c.tokens.toLocaleString('en-US')} token${c.tokens === 1 ? '' : 's'}`;
  return `${tokens} · ${(c.bytes / 1e6).toFixed(1)} MB · used ${age} ago`;
}
