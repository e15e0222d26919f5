import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AppState } from './app.svelte';
import type { Conversation } from './bindings/Conversation';
import type { ConversationSettings } from './bindings/ConversationSettings';
import type { GenerationEvent } from './bindings/GenerationEvent';
import type { ReasoningFormat } from './bindings/ReasoningFormat';
import type { ThreadMessage } from './bindings/ThreadMessage';

const defaults: ConversationSettings = {
  systemPrompt: '', temperature: 0.7, topK: 40, topP: 0.95, minP: 0.05, repeatPenalty: 1, penaltyWindow: 64,
  maxNewTokens: 512, seed: null, stopStrings: [], contextLength: 0, overflow: 'stopAtLimit', thinking: true, reasoningEffort: 'medium', toolServers: [], toolUse: 'auto', speculation: 'auto', draftTokens: 8, draftModel: null,
};

/** A fake shell: conversations in memory; chat_send streams through the channel. */
function fakeShell(opts: { events?: GenerationEvent[]; replayEvents?: GenerationEvent[]; failSend?: boolean; reasoning?: ReasoningFormat | null } = {}) {
  const conversations: Conversation[] = [];
  const threads = new Map<number, ThreadMessage[]>();
  const calls: string[] = [];
  const exported: Record<string, unknown>[] = [];
  let next = 1;
  mockIPC((cmd, args) => {
    calls.push(cmd);
    const a = args as Record<string, unknown>;
    switch (cmd) {
      case 'models_status':
        return { state: 'ready', path: '/m.gguf', name: 'm', architecture: 'llama', contextLength: 8192, device: 'cpu', reasoning: opts.reasoning ?? null };
      case 'models_recent':
      case 'presets_list':
      case 'chat_busy':
      case 'endpoints_list':
        return [];
      case 'conversations_backend':
        return { kind: 'local' };
      case 'conversations_list':
        return [...conversations];
      case 'conversations_cache_states':
        return conversations.map((c) => ({ conversationId: c.id, state: c.id === 1 ? 'warm' : 'cold' }));
      case 'conversations_create': {
        const c = { id: next++, title: '', createdAt: 0, updatedAt: 0, modelPath: null };
        conversations.unshift(c);
        threads.set(c.id, []);
        return c;
      }
      case 'conversations_delete': {
        const i = conversations.findIndex((c) => c.id === a.id);
        conversations.splice(i, 1);
        return null;
      }
      case 'conversations_thread':
        return threads.get(a.id as number) ?? [];
      case 'settings_get':
        return defaults;
      case 'settings_validate': {
        const s = a.settings as ConversationSettings;
        return s.temperature > 5 ? [{ field: 'temperature', message: 'must be between 0 and 5' }] : [];
      }
      case 'settings_set':
        return null;
      case 'chat_send': {
        if (opts.failSend) throw { kind: 'noModel', message: 'no model is loaded' };
        const conv = a.conversationId as number;
        const user = { id: next++, conversationId: conv, parentId: null, role: 'user', content: a.text, status: 'complete', stats: null, createdAt: 0 };
        const reply = { id: next++, conversationId: conv, parentId: user.id, role: 'assistant', content: '', status: 'streaming', stats: null, createdAt: 0 };
        threads.set(conv, [{ message: user, versionIds: [user.id] }, { message: reply, versionIds: [reply.id] }] as ThreadMessage[]);
        const channel = a.onEvent as { id: number };
        // Deliver events the way the shell does: {index, message} on the channel's callback.
        const internals = (window as unknown as { __TAURI_INTERNALS__: { runCallback: (id: number, m: unknown) => void } }).__TAURI_INTERNALS__;
        (opts.events ?? []).forEach((message, index) => internals.runCallback(channel.id, { index, message }));
        const variants = Array.from({ length: ((a.variants as number) ?? 1) - 1 }, () => ({ ...reply, id: next++ }));
        return { message: user, reply, variants };
      }
      case 'chat_regenerate': {
        const conv = a.conversationId as number;
        return Array.from({ length: a.variants as number }, () => ({ id: next++, conversationId: conv, parentId: 1, role: 'assistant', content: '', status: 'streaming', stats: null, createdAt: 0 }));
      }
      case 'chat_replay': {
        const channel = a.onEvent as { id: number };
        const internals = (window as unknown as { __TAURI_INTERNALS__: { runCallback: (id: number, m: unknown) => void } }).__TAURI_INTERNALS__;
        (opts.replayEvents ?? []).forEach((message, index) => internals.runCallback(channel.id, { index, message }));
        return null;
      }
      case 'conversations_export':
        exported.push(a);
        return null;
      case 'conversations_backup':
        exported.push(a);
        return conversations.length;
      case 'conversations_import': {
        // A bundle with two conversations, one of them already here; a
        // foreign file is refused whole.
        if (a.path !== '/in/chats.hearth') throw { kind: 'invalidInput', message: 'not a Hearth export: /in/evil.json' };
        const added = [{ id: 40, title: 'Imported A', createdAt: 0, updatedAt: 9, modelPath: null }, { id: 41, title: 'Imported B', createdAt: 0, updatedAt: 8, modelPath: null }];
        conversations.unshift(...added);
        const user = { id: 400, conversationId: 40, parentId: null, role: 'user', content: 'hello from afar', status: 'complete', stats: null, createdAt: 0 };
        threads.set(40, [{ message: user, versionIds: [400] }] as ThreadMessage[]);
        threads.set(41, []);
        return { conversationIds: [40, 41], skippedDuplicates: 1, cache: 'restored', cacheNote: null };
      }
      default:
        throw { kind: 'internal', message: `unexpected ${cmd}` };
    }
  });
  return { calls, conversations, exported };
}

describe('AppState', () => {
  beforeEach(() => clearMocks());
  afterEach(() => clearMocks());

  it('creates a conversation and opens it', async () => {
    fakeShell();
    const app = new AppState();
    await app.init();
    await app.create();
    expect(app.conversations).toHaveLength(1);
    expect(app.activeId).toBe(app.conversations[0].id);
    expect(app.threadOf).toBe(app.activeId);
    expect(app.activeSettings).toEqual(defaults);
    await app.refreshCaches();
    expect(app.cacheStates).toEqual({ 1: 'warm' });
  });

  it('streams tokens into the open conversation', async () => {
    fakeShell({ events: [{ event: 'started', data: { replyId: 0 } }, { event: 'tokens', data: { text: 'Hel', ids: [5], variant: 0 } }, { event: 'tokens', data: { text: 'lo', ids: [6, 7], variant: 0 } }] });
    const app = new AppState();
    await app.init();
    await app.create();
    expect(await app.send('hi')).toBe(true);
    const stream = app.activeStream!;
    // Tokens reach the page together, once per frame.
    expect(stream.text).toBe('');
    await new Promise((r) => setTimeout(r, 50));
    expect(stream.text).toBe('Hello');
    expect(stream.tokens).toBe(3);
    expect(stream.replyId).toBe(app.thread[1].message.id);
  });

  it('keeps the draft and shows the error in words when sending fails', async () => {
    fakeShell({ failSend: true });
    const app = new AppState();
    await app.init();
    await app.create();
    expect(await app.send('hi')).toBe(false);
    expect(app.error).toBe('no model is loaded');
    expect(app.activeStream).toBeUndefined();
  });

  it('shows field errors and does not save invalid settings', async () => {
    const shell = fakeShell();
    const app = new AppState();
    await app.init();
    await app.create();
    await app.updateSettings({ ...defaults, temperature: 9 });
    expect(app.activeFieldErrors).toEqual({ temperature: 'must be between 0 and 5' });
    expect(shell.calls).not.toContain('settings_set');
    await app.updateSettings({ ...defaults, temperature: 0.3 });
    expect(app.activeFieldErrors).toEqual({});
    expect(shell.calls).toContain('settings_set');
  });

  it('offers undo after a delete', async () => {
    fakeShell();
    const app = new AppState();
    await app.init();
    await app.create();
    const id = app.activeId!;
    await app.remove(id);
    expect(app.conversations).toHaveLength(0);
    expect(app.deleted?.id).toBe(id);
    expect(app.activeId).toBeNull();
    expect(app.threadOf).toBeNull();
  });

  it('replays a reply: busy while it runs, one at a time, then the verdict beside that reply', async () => {
    const outcome = { matched: true, compared: 2, recorded: 2, firstDifference: null, processedTokens: 5, stopped: false, notes: [] };
    const shell = fakeShell({ replayEvents: [{ event: 'started', data: { replyId: 2 } }, { event: 'tokens', data: { text: 'Hi', ids: [8, 9], variant: 0 } }] });
    const app = new AppState();
    await app.init();
    await app.create();
    await app.replay(2);
    expect(app.replays[app.activeId!]).toMatchObject({ replyId: 2, tokens: 2, done: false });
    expect(app.activeBusy).toBe(true);
    // A second click while it runs does not take over its place.
    await app.replay(2);
    expect(shell.calls.filter((c) => c === 'chat_replay')).toHaveLength(1);

    fakeShell({ replayEvents: [{ event: 'started', data: { replyId: 2 } }, { event: 'tokens', data: { text: 'Hi', ids: [8, 9], variant: 0 } }, { event: 'replayed', data: { outcome } }] });
    const other = new AppState();
    await other.init();
    await other.create();
    await other.replay(2);
    expect(other.replays[other.activeId!]).toMatchObject({ done: true, outcome, tokens: 2 });
    expect(other.activeBusy).toBe(false);
    expect(other.activeStream).toBeUndefined();
  });

  it('streams the replies of "Generate N" side by side', async () => {
    fakeShell({ events: [
      { event: 'started', data: { replyId: 0 } },
      { event: 'tokens', data: { text: 'Red', ids: [5], variant: 0 } },
      { event: 'tokens', data: { text: 'Blue', ids: [6, 7], variant: 2 } },
      { event: 'tokens', data: { text: 'Green', ids: [8], variant: 1 } },
    ] });
    const app = new AppState();
    await app.init();
    await app.create();
    app.variantCount = 3;
    expect(await app.send('a colour?')).toBe(true);
    await new Promise((r) => setTimeout(r, 50));
    const s = app.activeStream!;
    expect([s.text, ...s.variants.map((v) => v.text)]).toEqual(['Red', 'Green', 'Blue']);
    expect(s.variants.map((v) => v.tokens)).toEqual([1, 2]);
    expect(s.variants.every((v) => v.replyId > 0)).toBe(true);
  });

  it('regenerates as many versions as the reply count asks for, side by side', async () => {
    const shell = fakeShell();
    const app = new AppState();
    await app.init();
    await app.create();
    app.variantCount = 3;
    await app.regenerate(2);
    const s = app.activeStream!;
    expect(s.variants).toHaveLength(2);
    expect([s.replyId, ...s.variants.map((v) => v.replyId)].every((id) => id > 0)).toBe(true);
    expect(shell.calls).toContain('chat_regenerate');
  });

  it('counts a streaming reply\'s thinking tokens until the close tag, per variant', async () => {
    fakeShell({ reasoning: { open: '<think>', close: '</think>', switch: 'enable_thinking', openedByPrompt: false, answerStart: null, effort: null }, events: [
      { event: 'started', data: { replyId: 0 } },
      { event: 'tokens', data: { text: '<think>', ids: [1], variant: 0 } },
      { event: 'tokens', data: { text: '\nHmm', ids: [2, 3], variant: 0 } },
      { event: 'tokens', data: { text: '<think>\nOk', ids: [1, 4], variant: 1 } },
      { event: 'tokens', data: { text: '</think>', ids: [5], variant: 0 } },
      { event: 'tokens', data: { text: '\n\nFour', ids: [6, 7], variant: 0 } },
    ] });
    const app = new AppState();
    await app.init();
    await app.create();
    expect(app.activeReasoning?.switch).toBe('enable_thinking');
    app.variantCount = 2;
    expect(await app.send('2+2?')).toBe(true);
    await new Promise((r) => setTimeout(r, 50));
    const s = app.activeStream!;
    expect(s.text).toBe('<think>\nHmm</think>\n\nFour');
    expect(s.tokens).toBe(6);
    expect(s.thought?.tokens).toBe(4);
    expect(s.thought!.ms).toBeGreaterThanOrEqual(0);
    expect(s.firstTokenAt).not.toBeNull();
    // The second reply is still thinking.
    expect(s.variants[0].thought).toBeNull();
    expect(s.variants[0].firstTokenAt).not.toBeNull();
    expect(s.variants[0].tokens).toBe(2);
  });

  it('imports a file: the list refreshed, the first imported conversation open, a notice', async () => {
    fakeShell();
    const app = new AppState();
    await app.init();
    await app.create();
    const result = await app.importFrom('/in/chats.hearth');
    expect(result?.conversationIds).toEqual([40, 41]);
    expect(app.conversations.map((c) => c.id)).toEqual([40, 41, 1]);
    expect(app.activeId).toBe(40);
    expect(app.thread.map((t) => t.message.content)).toEqual(['hello from afar']);
    expect(app.activeSettings).toEqual(defaults);
    expect(app.error).toBeNull();
    expect(app.notice).toEqual({
      kind: 'import',
      text: 'Imported 2 conversations (already here: 1 skipped) — cache restored: the next turn reads only your new message',
    });
  });

  it('shows a refused import\'s error and changes nothing', async () => {
    const shell = fakeShell();
    const app = new AppState();
    await app.init();
    await app.create();
    await app.send('hi');
    const state = () => JSON.parse(JSON.stringify({ conversations: app.conversations, activeId: app.activeId, thread: app.thread, settings: app.activeSettings }));
    const before = state();
    const listed = shell.calls.filter((c) => c === 'conversations_list').length;
    expect(await app.importFrom('/in/evil.json')).toBeUndefined();
    expect(app.error).toBe('not a Hearth export: /in/evil.json');
    expect(app.notice).toBeNull();
    expect(shell.calls.filter((c) => c === 'conversations_list')).toHaveLength(listed);
    expect(state()).toEqual(before);
  });

  it('exports a conversation and backs everything up to the paths given', async () => {
    const shell = fakeShell();
    const app = new AppState();
    await app.init();
    await app.create();
    const id = app.activeId!;
    expect(await app.exportConversation(id, 'bundle', '/out/chat.hearth')).toBe(true);
    expect(await app.backup('/out/hearth-backup-2025-01-07.json')).toBe(1);
    expect(shell.exported).toEqual([{ id, format: 'bundle', path: '/out/chat.hearth' }, { path: '/out/hearth-backup-2025-01-07.json' }]);
    expect(app.notice).toEqual({ kind: 'backup', text: 'Backed up 1 conversation to /out/hearth-backup-2025-01-07.json' });
  });
});
