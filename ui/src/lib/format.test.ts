import { describe, expect, it } from 'vitest';
import type { ImportResult } from './bindings/ImportResult';
import { backupFileName, draftsInWords, fileNameOf, finishInWords, importInWords, replayInWords, requestCacheInWords, statsInWords, thinkingInWords, titleOf, waitingInWords } from './format';

describe('format', () => {
  it("says what an API client's cache holds and when it was last used", () => {
    const at = 1_000_000_000;
    const cache = { tokens: 3412, bytes: 41_234_567, lastUsedMs: at };
    expect(requestCacheInWords(cache, at + 12_400)).toBe('3,412 tokens · 41.2 MB · used 12 s ago');
    expect(requestCacheInWords({ ...cache, tokens: 1 }, at + 5 * 60_000)).toBe('1 token · 41.2 MB · used 5 min ago');
    expect(requestCacheInWords(cache, at + 3 * 3_600_000)).toBe('3,412 tokens · 41.2 MB · used 3 h ago');
    expect(requestCacheInWords(cache, at + 3_599_000)).toBe('3,412 tokens · 41.2 MB · used 59 min ago');
    // A clock behind the worker's never says "-1 s".
    expect(requestCacheInWords(cache, at - 5_000)).toBe('3,412 tokens · 41.2 MB · used 0 s ago');
  });

  it('says what a reply is waiting for, with the prompt read so far', () => {
    const base = { tokens: 0, queuePosition: 0, started: true, prefill: null };
    expect(waitingInWords({ ...base, started: false, queuePosition: 2 })).toBe('Waiting for other chats (position 2)…');
    expect(waitingInWords({ ...base, started: false })).toBe('Reading the conversation…');
    expect(waitingInWords({ ...base, prefill: { done: 1024, total: 4000 } })).toBe('Reading the conversation… 1,024 / 4,000 tokens');
    expect(waitingInWords({ ...base, prefill: { done: 0, total: 19 } })).toBe('Reading the conversation…');
    expect(waitingInWords({ ...base, prefill: { done: 4000, total: 4000 } })).toBe('');
    expect(waitingInWords({ ...base, tokens: 3, prefill: { done: 0, total: 4000 } })).toBe('');
  });

  it('says why a reply ended', () => {
    expect(finishInWords('cache_full')).toBe('stopped: context full');
    expect(finishInWords('end_token')).toBe('finished');
    expect(finishInWords('cancelled')).toBe('stopped by you');
    expect(finishInWords('error', 'disk full')).toBe('failed: disk full');
  });

  it('shows cache reuse in the stats', () => {
    const words = statsInWords({
      promptTokens: 62, processedTokens: 18, generatedTokens: 10, ttftMs: 41.6, tokensPerS: 80.04,
      finishReason: 'end_token', seed: 7, temperature: 0.7, error: null, droppedMessages: 0, replay: null,
      thinkingTokens: null, thinkingMs: null,
    });
    expect(words).toEqual(['prompt 62 tok', 'processed 18 this turn', 'first token 42 ms', '80.0 tok/s', 'seed 7', 'temp 0.7', 'finished']);
  });

  it("says how many of a reply's drafted tokens were taken", () => {
    const d = { mode: 'auto' as const, draftTokens: 8, drafted: 60, accepted: 45 };
    expect(draftsInWords(d)).toBe('drafts: 45 of 60 taken (75%)');
    expect(draftsInWords({ ...d, drafted: 3, accepted: 2 })).toBe('drafts: 2 of 3 taken (67%)');
    expect(draftsInWords({ ...d, drafted: 9, accepted: 9 })).toBe('drafts: 9 of 9 taken (100%)');
    expect(draftsInWords({ ...d, drafted: 0, accepted: 0 })).toBe('');
  });

  it('says how a replay went', () => {
    const base = { replyId: 3, tokens: 4, recorded: 9, done: false, outcome: null, error: null };
    expect(replayInWords(base)).toBe('Replaying… 4/9 tokens');
    const outcome = { matched: true, compared: 9, recorded: 9, firstDifference: null, processedTokens: 12, stopped: false, notes: [] };
    expect(replayInWords({ ...base, done: true, outcome })).toBe('Replay matched all 9 tokens, 12 prompt tokens run');
    expect(replayInWords({ ...base, done: true, outcome: { ...outcome, matched: false, firstDifference: 2, notes: ['recorded on cuda, replayed on cpu'] } }))
      .toBe('Replay differs from token 3 of 9 (recorded on cuda, replayed on cpu)');
    expect(replayInWords({ ...base, done: true, error: 'another model file' })).toBe('Replay failed: another model file');
  });

  it('names untitled chats', () => {
    expect(titleOf('')).toBe('New chat');
    expect(titleOf('Rust')).toBe('Rust');
  });

  it('says how long a model thought', () => {
    expect(thinkingInWords({ live: true, closed: false, tokens: 42, ms: 3900 })).toBe('Thinking… 3 s · 42 tokens');
    expect(thinkingInWords({ live: true, closed: false, tokens: null, ms: null })).toBe('Thinking… 0 s');
    expect(thinkingInWords({ live: false, closed: true, tokens: 120, ms: 3240 })).toBe('Thought for 3.2 s · 120 tokens');
    expect(thinkingInWords({ live: true, closed: true, tokens: 1, ms: 50 })).toBe('Thought for 0.1 s · 1 token');
    expect(thinkingInWords({ live: false, closed: true, tokens: null, ms: null })).toBe('Thought');
    expect(thinkingInWords({ live: false, closed: false, tokens: 512, ms: null })).toBe('Thinking (stopped before an answer) · 512 tokens');
  });

  it('says what an import did', () => {
    const one: ImportResult = { conversationIds: [4], skippedDuplicates: 0, cache: 'none', cacheNote: null };
    expect(importInWords(one)).toBe('Imported 1 conversation');
    expect(importInWords({ ...one, conversationIds: [4, 5, 6], skippedDuplicates: 2 })).toBe('Imported 3 conversations (already here: 2 skipped)');
    expect(importInWords({ ...one, conversationIds: [], skippedDuplicates: 1 })).toBe('Nothing new to import (already here: 1 skipped)');
    expect(importInWords({ ...one, cache: 'restored' })).toBe('Imported 1 conversation — cache restored: the next turn reads only your new message');
    expect(importInWords({ ...one, cache: 'skipped', cacheNote: 'made with another model (qwen3-0.6b)' }))
      .toBe('Imported 1 conversation — text imported; cache skipped: made with another model (qwen3-0.6b)');
  });

  it('names exported files after the title, safely', () => {
    expect(fileNameOf('Rust lifetimes', 'md')).toBe('Rust lifetimes.md');
    expect(fileNameOf('a/b\\c: "d" <e>|f?*', 'json')).toBe('a b c d e f.json');
    expect(fileNameOf('../../etc/passwd', 'hearth')).toBe('etc passwd.hearth');
    expect(fileNameOf('line\nbreak\ttab', 'md')).toBe('line break tab.md');
    expect(fileNameOf('...', 'md')).toBe('conversation.md');
    expect(fileNameOf('   ', 'md')).toBe('conversation.md');
    expect(fileNameOf('x'.repeat(200), 'md')).toBe(`${'x'.repeat(80)}.md`);
    expect(fileNameOf('日本語のチャット', 'json')).toBe('日本語のチャット.json');
    expect(backupFileName(new Date(2025, 0, 7, 23, 59))).toBe('hearth-backup-2025-01-07.json');
  });
});
