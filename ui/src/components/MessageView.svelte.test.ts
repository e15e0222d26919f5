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
