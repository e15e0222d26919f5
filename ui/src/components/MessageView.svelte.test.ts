// The message component with a "Generate N" stream: every variant shows in
// its own column as its tokens arrive, and model text stays text.
import { flushSync, mount, unmount } from 'svelte';
import { describe, expect, it } from 'vitest';
import type { Stream } from '../lib/app.svelte';
import type { ThreadMessage } from '../lib/bindings/ThreadMessage';
import MessageView from './MessageView.svelte';

const item: ThreadMessage = {
  message: { id: 7, conversationId: 1, parentId: 6, role: 'assistant', content: '', status: 'streaming', stats: null, createdAt: 0 },
  versionIds: [7, 8, 9],
};

describe('MessageView', () => {
  it('shows the variants of a stream side by side as they grow', () => {
    const stream: Stream = $state({
      replyId: 7, text: 'Red', queuePosition: 0, started: true, tokens: 1, prefill: null,
      variants: [{ replyId: 8, text: '', tokens: 0 }, { replyId: 9, text: 'Blue', tokens: 1 }],
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
    const stream: Stream = $state({ replyId: 7, text: '**Hi**', queuePosition: 0, started: true, tokens: 1, prefill: null, variants: [] });
    const target = document.createElement('div');
    const view = mount(MessageView, { target, props: { item, stream } });
    flushSync();
    expect(target.querySelector('[data-testid=variants]')).toBeNull();
    expect(target.querySelector('[data-testid=message-body] strong')!.textContent).toBe('Hi');
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
        stats: { promptTokens: 5, processedTokens: 5, generatedTokens: 2, ttftMs: 1, tokensPerS: 1, finishReason: 'end_token', seed: 1, temperature: 1, error: null, droppedMessages: 0, replay: {} as never },
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
