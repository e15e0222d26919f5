// The message component with a "Generate N" stream: every variant shows in
// its own column as its tokens arrive, and model text stays text.
import { flushSync, mount, unmount } from 'svelte';
import { describe, expect, it } from 'vitest';
import type { Stream } from '../lib/app.svelte';
import type { DraftStats } from '../lib/bindings/DraftStats';
import type { ThreadMessage } from '../lib/bindings/ThreadMessage';
import MessageView from './MessageView.svelte';

const item: ThreadMessage = {
  message: { id: 7, conversationId: 1, parentId: 6, role: 'assistant', content: '', status: 'streaming', stats: null, createdAt: 0 },
  versionIds: [7, 8, 9],
  toolCalls: [],
};

describe('MessageView', () => {
  it('shows the variants of a stream side by side as they grow', () => {
    const stream: Stream = $state({
      replyId: 7, text: 'Red', queuePosition: 0, started: true, tokens: 1, prefill: null, firstTokenAt: null, thought: null, awaiting: null,
      variants: [{ replyId: 8, text: '', tokens: 0, firstTokenAt: null, thought: null }, { replyId: 9, text: 'Blue', tokens: 1, firstTokenAt: null, thought: null }],
    });
    const target = document.createElement('div');
    const view = mount(MessageView, { target, props: { item, stream } });
    flushSync();
    const columns = () => [...target.querySelectorAll('[data-testid=variant]')].map((c) => c.querySelector('.body')!.textContent!.trim());
    expect(columns()).toEqual(['Red', '', 'Blue']);

    stream.variants[0].text += 'Green <img src=x onerror=alert(1)>';
    stream.variants[0].tokens += 4;
    stream.text += ' and more';
    flushSync();
    expect(columns()).toEqual(['Red and more', 'Green <img src=x onerror=alert(1)>', 'Blue']);
    expect(target.querySelector('img')).toBeNull();
    expect(target.querySelector('[data-variant="1"] .who')!.textContent).toContain('4 tokens');
    unmount(view);
  });

  it('shows one stream as one body', () => {
    const stream: Stream = $state({ replyId: 7, text: '**Hi**', queuePosition: 0, started: true, tokens: 1, prefill: null, firstTokenAt: null, thought: null, awaiting: null, variants: [] });
    const target = document.createElement('div');
    const view = mount(MessageView, { target, props: { item, stream } });
    flushSync();
    expect(target.querySelector('[data-testid=variants]')).toBeNull();
    expect(target.querySelector('[data-testid=message-body] strong')!.textContent).toBe('Hi');
    unmount(view);
  });
});

describe('reasoning blocks', () => {
  const stats = {
    promptTokens: 5, processedTokens: 5, generatedTokens: 130, ttftMs: 1, tokensPerS: 1, finishReason: 'end_token', seed: 1, temperature: 1,
    error: null, droppedMessages: 0, replay: null, thinkingTokens: 120, thinkingMs: 3240,
  };
  const summary = (t: HTMLElement) => t.querySelector('[data-testid=thinking-summary]')!.textContent!.replace(/\s+/g, ' ').trim();

  it('shows a finished reply\'s thinking collapsed, with its count and time, and the answer as Markdown', () => {
    const done: ThreadMessage = {
      ...item,
      message: {
        ...item.message, status: 'complete', stats,
        content: '<think>\nThe user wants <img src=x onerror=alert(1)> and **bold**.\n</think>\n\nHere is **the answer**.',
      },
    };
    const target = document.createElement('div');
    const view = mount(MessageView, { target, props: { item: done } });
    flushSync();
    const block = target.querySelector<HTMLElement>('[data-testid=thinking]')!;
    const body = target.querySelector<HTMLElement>('[data-testid=thinking-body]')!;
    expect(block.dataset.open).toBe('false');
    expect(body.hidden).toBe(true);
    expect(summary(target)).toBe('▸ Thought for 3.2 s · 120 tokens');
    const answer = target.querySelector('[data-testid=message-body]')!;
    expect(answer.querySelector('strong')!.textContent).toBe('the answer');
    expect(answer.textContent).not.toContain('think');

    (target.querySelector('[data-testid=thinking-summary]') as HTMLButtonElement).click();
    flushSync();
    expect(block.dataset.open).toBe('true');
    expect(body.hidden).toBe(false);
    // Thinking is model text: shown as text, never as HTML.
    expect(body.textContent).toBe('The user wants <img src=x onerror=alert(1)> and **bold**.');
    expect(target.querySelector('img')).toBeNull();
    expect(body.querySelector('strong')).toBeNull();
    unmount(view);
  });

  it('shows no block for a reply without thinking, or with an empty one', () => {
    for (const content of ['Just **an answer**.', '<think>\n\n</think>\n\nJust **an answer**.']) {
      const target = document.createElement('div');
      const view = mount(MessageView, { target, props: { item: { ...item, message: { ...item.message, status: 'complete', content } } } });
      flushSync();
      expect(target.querySelector('[data-testid=thinking]')).toBeNull();
      expect(target.querySelector('[data-testid=message-body]')!.textContent!.trim()).toBe('Just an answer.');
      unmount(view);
    }
  });

  it('streams the thinking into the collapsed block, live, then the answer below it', () => {
    const stream: Stream = $state({
      replyId: 7, text: '<think>\nLet me', queuePosition: 0, started: true, tokens: 3, prefill: null,
      firstTokenAt: performance.now() - 2500, thought: null, awaiting: null, variants: [],
    });
    const target = document.createElement('div');
    const view = mount(MessageView, { target, props: { item, stream } });
    flushSync();
    const block = target.querySelector<HTMLElement>('[data-testid=thinking]')!;
    expect(block.dataset.open).toBe('false');
    expect(block.classList.contains('live')).toBe(true);
    expect(summary(target)).toBe('▸ Thinking… 2 s · 3 tokens');
    expect(target.querySelector('[data-testid=thinking-body]')!.textContent).toBe('Let me');
    expect(target.querySelector('[data-testid=message-body]')!.textContent!.trim()).toBe('');

    stream.text += ' add.</th';
    stream.tokens += 2;
    flushSync();
    expect(target.querySelector('[data-testid=thinking-body]')!.textContent).toBe('Let me add.');

    stream.text += 'ink>\n\n**Fo';
    stream.tokens += 2;
    stream.thought = { tokens: 6, ms: 2700 };
    flushSync();
    expect(target.querySelector('[data-testid=thinking]')).toBe(block);
    expect(block.classList.contains('live')).toBe(false);
    expect(summary(target)).toBe('▸ Thought for 2.7 s · 6 tokens');
    stream.text += 'ur**';
    flushSync();
    expect(target.querySelector('[data-testid=message-body] strong')!.textContent).toBe('Four');
    expect(target.querySelector('[data-testid=thinking-body]')!.textContent).toBe('Let me add.');
    unmount(view);
  });

  it('splits each variant column into its own thinking and answer', () => {
    const stream: Stream = $state({
      replyId: 7, text: '<think>\nHmm', queuePosition: 0, started: true, tokens: 2, prefill: null, firstTokenAt: performance.now(), thought: null, awaiting: null,
      variants: [{ replyId: 8, text: '<think>ok</think>\n\nBlue', tokens: 4, firstTokenAt: performance.now(), thought: { tokens: 3, ms: 900 } }],
    });
    const target = document.createElement('div');
    const view = mount(MessageView, { target, props: { item, stream } });
    flushSync();
    const columns = [...target.querySelectorAll<HTMLElement>('[data-testid=variant]')];
    expect(columns.map((c) => c.querySelector('[data-testid=thinking]') !== null)).toEqual([true, true]);
    expect(summary(columns[0])).toBe('▸ Thinking… 0 s · 2 tokens');
    expect(summary(columns[1])).toBe('▸ Thought for 0.9 s · 3 tokens');
    expect(columns.map((c) => c.querySelector('.body')!.textContent!.trim())).toEqual(['', 'Blue']);
    unmount(view);
  });
});

describe('the token view', () => {
  it('shades tokens, shows a token\'s alternatives, and continues from one', async () => {
    const { app } = await import('../lib/app.svelte');
    const { mockIPC, clearMocks } = await import('@tauri-apps/api/mocks');
    const calls: Record<string, unknown>[] = [];
    mockIPC((cmd, args) => {
      calls.push({ cmd, ...(args as object) });
      if (cmd === 'chat_continue_with') return { ...item.message, id: 11, content: 'The sky' };
      if (cmd === 'conversations_thread') return [];
      throw new Error(`unexpected ${cmd}`);
    });
    app.activeId = 1;
    app.tokenViews[7] = [
      { id: 1, text: 'The', logprob: -0.01, alternatives: [{ id: 1, text: 'The', logprob: -0.01 }, { id: 2, text: 'A', logprob: -5 }] },
      { id: 3, text: ' sea', logprob: -1.6, alternatives: [{ id: 4, text: ' sky', logprob: -0.3 }, { id: 3, text: ' sea', logprob: -1.6 }] },
    ];
    const done: ThreadMessage = {
      ...item,
      message: {
        ...item.message, content: 'The sea', status: 'complete',
        stats: { promptTokens: 5, processedTokens: 5, generatedTokens: 2, ttftMs: 1, tokensPerS: 1, finishReason: 'end_token', seed: 1, temperature: 1, error: null, droppedMessages: 0, replay: {} as never, thinkingTokens: null, thinkingMs: null },
      },
    };
    const target = document.createElement('div');
    document.body.append(target);
    const view = mount(MessageView, { target, props: { item: done } });
    flushSync();
    (target.querySelector('[data-testid=show-tokens]') as HTMLButtonElement).click();
    flushSync();
    const spans = [...target.querySelectorAll<HTMLElement>('[data-testid=token]')];
    expect(spans.map((s) => s.textContent)).toEqual(['The', ' sea']);
    expect(target.querySelector('[data-testid=token-view]')!.classList.contains('shaded')).toBe(true);
    expect(Number(spans[1].style.getPropertyValue('--unlikely'))).toBeGreaterThan(0.7);
    expect(spans[1].title).toContain('" sky" 74%');

    spans[1].click();
    flushSync();
    const alternatives = [...target.querySelectorAll<HTMLButtonElement>('[data-testid=alternative]')];
    expect(alternatives.map((a) => a.dataset.token)).toEqual(['4']);
    alternatives[0].click();
    await new Promise((r) => setTimeout(r, 20));
    expect(calls.find((c) => c.cmd === 'chat_continue_with')).toMatchObject({ conversationId: 1, replyId: 7, index: 1, token: 4 });
    unmount(view);
    clearMocks();
  });
});

describe('reply stats', () => {
  const stats = {
    promptTokens: 5, processedTokens: 5, generatedTokens: 80, ttftMs: 12, tokensPerS: 50, finishReason: 'end_token', seed: 1, temperature: 0,
    error: null, droppedMessages: 0, replay: null, thinkingTokens: null, thinkingMs: null,
  };
  const statsText = (drafts?: DraftStats) => {
    const done: ThreadMessage = { ...item, message: { ...item.message, status: 'complete', content: 'Done.', stats: { ...stats, drafts } } };
    const target = document.createElement('div');
    const view = mount(MessageView, { target, props: { item: done } });
    flushSync();
    const el = target.querySelector<HTMLElement>('[data-testid=reply-stats]')!;
    const out = { text: el.textContent!, drafted: el.dataset.drafted, accepted: el.dataset.accepted };
    unmount(view);
    return out;
  };

  it('says how many drafted tokens a reply took', () => {
    const shown = statsText({ mode: 'auto', draftTokens: 8, drafted: 60, accepted: 45 });
    expect(shown.text).toBe('prompt 5 tok · processed 5 this turn · first token 12 ms · 50.0 tok/s · drafts: 45 of 60 taken (75%) · seed 1 · temp 0 · finished');
    expect(shown).toMatchObject({ drafted: '60', accepted: '45' });
    expect(statsText({ mode: 'ngram', draftTokens: 4, drafted: 3, accepted: 2 }).text).toContain('drafts: 2 of 3 taken (67%)');
    expect(statsText({ mode: 'ngram', draftTokens: 4, drafted: 7, accepted: 0 }).text).toContain('drafts: 0 of 7 taken (0%)');
    expect(statsText({ mode: 'draft', draftTokens: 8, drafted: 40, accepted: 30 }).text).toContain('drafts: 30 of 40 taken (75%)');
  });

  it('says nothing of drafts where none ran or none were drafted', () => {
    for (const drafts of [undefined, { mode: 'auto', draftTokens: 8, drafted: 0, accepted: 0 } as const]) {
      const shown = statsText(drafts);
      expect(shown.text).toBe('prompt 5 tok · processed 5 this turn · first token 12 ms · 50.0 tok/s · seed 1 · temp 0 · finished');
      expect(shown.text).not.toContain('draft');
    }
    expect(statsText(undefined).drafted).toBeUndefined();
  });
});
