// A reply that ends in tool calls keeps its conversation's stream open:
// the calls' events mark the one waiting for approval, and the reply that
// reads their results streams into the same stream until it finishes.
import { describe, expect, it } from 'vitest';
import type { GenerationEvent } from './bindings/GenerationEvent';
import type { ToolCallRecord } from './bindings/ToolCallRecord';
import { StreamStore } from './streams.svelte';

const stats = { promptTokens: 1, processedTokens: 1, generatedTokens: 1, ttftMs: 1, tokensPerS: 1, finishReason: 'end_token', seed: 1, temperature: 0, error: null, droppedMessages: 0, replay: null, thinkingTokens: null, thinkingMs: null };
const call: ToolCallRecord = { callId: 'call_7_0', name: 'get_time', arguments: '{}', server: null, tool: null, status: 'pending', result: '', elapsedMs: null, truncated: false };

describe('StreamStore and tool calls', () => {
  it('keeps the stream through the calls and into the next reply', async () => {
    const live = new StreamStore();
    let on: (e: GenerationEvent) => void = () => {};
    let progressed = 0;
    const notices: string[] = [];
    let ended: string | null | undefined;
    await live.start(1, {}, async (listener) => { on = listener; }, (e) => (ended = e), (notice) => (notice ? notices.push(notice) : progressed++));
    on({ event: 'toolsUnavailable', data: { errors: ['server “x”: the command “x” was not found'] } });
    expect(notices).toEqual(['Tools left out of this reply: server “x”: the command “x” was not found']);
    on({ event: 'started', data: { replyId: 7 } });
    on({ event: 'finished', data: { reason: 'tool_calls', stats, toolCalls: [call] } });
    expect(live.busy(1)).toBe(true);
    expect(live.byConversation[1].replyId).toBe(-1);
    on({ event: 'toolCall', data: { replyId: 7, position: 0, call, awaitingApproval: true } });
    expect(live.byConversation[1].awaiting).toBe('call_7_0');
    on({ event: 'toolCall', data: { replyId: 7, position: 0, call: { ...call, status: 'ok', result: 'noon' }, awaitingApproval: false } });
    expect(live.byConversation[1].awaiting).toBeNull();
    on({ event: 'started', data: { replyId: 8 } });
    expect(live.byConversation[1].replyId).toBe(8);
    expect(progressed).toBeGreaterThanOrEqual(4);
    expect(ended).toBeUndefined();
    on({ event: 'finished', data: { reason: 'end_token', stats } });
    expect(live.busy(1)).toBe(false);
    expect(ended).toBeNull();
  });
});
