import { describe, expect, it } from 'vitest';
import { finishInWords, replayInWords, statsInWords, titleOf, waitingInWords } from './format';

describe('format', () => {
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
    });
    expect(words).toEqual(['prompt 62 tok', 'processed 18 this turn', 'first token 42 ms', '80.0 tok/s', 'seed 7', 'temp 0.7', 'finished']);
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
});
