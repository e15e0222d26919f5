// The UI's state: conversations, the shown thread, replies streaming in any
// conversation, the model, and the open conversation's settings. Components
// read it and call its methods; only this file talks to the shell.
import { api, asAppError, type ExportFormat } from './api';
import { EndpointStore } from './endpoints.svelte';
import { McpStore } from './mcp.svelte';
import { HubStore } from './hub.svelte';
import type { ToolDecision } from './bindings/ToolDecision';
import { ModelStore } from './models.svelte';
import { SettingsStore } from './settings.svelte';
import { DEFAULT_REASONING } from './reasoning';
import { StreamStore, type Replay, type Stream } from './streams.svelte';
import type { Backend } from './bindings/Backend';
import type { CacheState } from './bindings/CacheState';
import type { ContextUsage } from './bindings/ContextUsage';
import type { Conversation } from './bindings/Conversation';
import type { ConversationSettings } from './bindings/ConversationSettings';
import type { ImportResult } from './bindings/ImportResult';
import type { ReasoningFormat } from './bindings/ReasoningFormat';
import type { SearchHit } from './bindings/SearchHit';
import type { ThreadMessage } from './bindings/ThreadMessage';
import type { TokenView } from './bindings/TokenView';
import { importInWords } from './format';

export type { Replay, Stream } from './streams.svelte';
export { FRAME_MS } from './streams.svelte';

export class AppState {
  conversations = $state<Conversation[]>([]);
  /** Where each conversation's KV cache is: memory, disk, or nowhere. */
  cacheStates = $state<Record<number, CacheState>>({});
  searchQuery = $state('');
  searchHits = $state<SearchHit[] | null>(null);
  activeId = $state<number | null>(null);
  thread = $state<ThreadMessage[]>([]);
  /** The conversation `thread` was loaded for: while a chat opens, the
   *  page still shows the one before until its thread arrives. */
  threadOf = $state<number | null>(null);
  /** Replies and replays running, by conversation. */
  readonly live = new StreamStore((id) => (this.reasoningFor(id) ?? DEFAULT_REASONING).close);
  readonly models = new ModelStore((f) => this.guard(f));
  readonly settings = new SettingsStore((f) => this.guard(f));
  readonly endpoints = new EndpointStore((f) => this.guard(f));
  readonly mcp = new McpStore();
  /** Get models: a downloaded model (the shell opens it) starts a new chat. */
  readonly hub = new HubStore(
    (f) => this.guard(f),
    () => {
      this.hub.hide();
      void this.create();
    },
  );
  /** Replies' tokens with their alternatives, by reply id, once asked for. */
  tokenViews = $state<Record<number, TokenView[]>>({});
  /** Token views shade each token by how unlikely the model found it. */
  shadeTokens = $state(true);
  /** How many replies a send writes at once ("Generate N"). */
  variantCount = $state(1);
  /** The last deleted conversation, while its undo is offered. */
  deleted = $state<Conversation | null>(null);
  error = $state<string | null>(null);
  /** Tools a reply went without (a chat's server that cannot start), until dismissed. */
  toolNotice = $state<string | null>(null);
  /** A short note on what the last import, export or backup did. */
  notice = $state<{ kind: 'import' | 'export' | 'backup'; text: string } | null>(null);

  get active(): Conversation | undefined {
    return this.conversations.find((c) => c.id === this.activeId);
  }

  get streams(): Record<number, Stream> {
    return this.live.byConversation;
  }

  get replays(): Record<number, Replay> {
    return this.live.replays;
  }

  get activeStream(): Stream | undefined {
    return this.activeId === null ? undefined : this.streams[this.activeId];
  }

  /** Where the open conversation's replies come from: the local model or an endpoint's. */
  get activeBackend(): Backend {
    return (this.activeId === null ? undefined : this.endpoints.backends[this.activeId]) ?? { kind: 'local' };
  }

  /** Whether the open conversation can be sent to: its remote endpoint, or a ready local model. */
  get canSend(): boolean {
    return this.activeBackend.kind === 'remote' || this.models.status.state === 'ready';
  }

  /** How replies in a conversation mark their thinking: the loaded
   *  model's template's tags; null (the `<think>` pair assumed) for a
   *  remote model's conversation, or when the template names none. */
  reasoningFor(conversationId: number | null): ReasoningFormat | null {
    const backend = conversationId === null ? undefined : this.endpoints.backends[conversationId];
    return backend?.kind === 'remote' ? null : this.models.reasoning;
  }

  get activeReasoning(): ReasoningFormat | null {
    return this.reasoningFor(this.activeId);
  }

  /** The open conversation's settings, once read. */
  get activeSettings(): ConversationSettings | null {
    return this.activeId === null ? null : (this.settings.byConversation[this.activeId] ?? null);
  }

  get activeFieldErrors(): Record<string, string> {
    return this.activeId === null ? {} : (this.settings.fieldErrors[this.activeId] ?? {});
  }

  /** The open conversation's own model (the one that last replied in it),
   *  when another is loaded now: the notice above the composer offers both. */
  get activeModelMismatch(): { path: string; name: string; current: string } | null {
    const c = this.active;
    if (!c || this.activeBackend.kind === 'remote') return null;
    return this.models.mismatch(c.id, c.modelPath);
  }

  /** The open conversation is writing a reply or replaying one. */
  get activeBusy(): boolean {
    return this.activeId !== null && this.live.busy(this.activeId);
  }

  /** Call after subscribing to model-status events. */
  async init() {
    await this.guard(async () => {
      await this.models.load();
      await this.settings.loadPresets();
      await this.endpoints.load();
      void this.endpoints.loadModels();
      await this.mcp.load();
      this.conversations = await api.conversations.list();
      void this.refreshCaches();
      if (this.conversations.length > 0) await this.open(this.conversations[0].id);
    });
  }

  async guard<T>(f: () => Promise<T>): Promise<T | undefined> {
    try {
      this.error = null;
      return await f();
    } catch (e) {
      this.error = asAppError(e).message;
      return undefined;
    }
  }

  async refreshList() {
    this.conversations = await api.conversations.list();
    void this.refreshCaches();
    if (this.searchQuery.trim()) this.searchHits = await api.conversations.search(this.searchQuery);
  }

  async refreshCaches() {
    try {
      const states = await api.conversations.cacheStates();
      this.cacheStates = Object.fromEntries(states.map((c) => [c.conversationId, c.state]));
    } catch {
      // Informational only.
    }
  }

  async clearCaches() {
    await this.guard(async () => {
      await api.settings.clearCaches();
      // The worker clears after any reply in progress.
      setTimeout(() => void this.refreshCaches(), 300);
    });
  }

  async search(query: string) {
    this.searchQuery = query;
    await this.guard(async () => {
      this.searchHits = query.trim() ? await api.conversations.search(query) : null;
    });
  }

  async create() {
    await this.guard(async () => {
      const c = await api.conversations.create();
      this.conversations = [c, ...this.conversations];
      await this.open(c.id);
    });
  }

  async open(id: number) {
    this.models.hideLibrary();
    this.hub.hide();
    await this.guard(async () => {
      this.activeId = id;
      const [thread, settings] = await Promise.all([api.conversations.thread(id), api.settings.get(id), this.endpoints.loadBackend(id)]);
      if (this.activeId !== id) return;
      this.thread = thread;
      this.threadOf = id;
      this.settings.show(id, settings);
    });
  }

  async rename(id: number, title: string) {
    await this.guard(async () => {
      const c = await api.conversations.rename(id, title);
      this.conversations = this.conversations.map((x) => (x.id === id ? c : x));
    });
  }

  async remove(id: number) {
    await this.guard(async () => {
      const c = this.conversations.find((x) => x.id === id) ?? null;
      await api.conversations.delete(id);
      this.live.forget(id);
      this.settings.forget(id);
      this.deleted = c;
      this.conversations = this.conversations.filter((x) => x.id !== id);
      if (this.searchHits) this.searchHits = this.searchHits.filter((h) => h.conversation.id !== id);
      if (this.activeId === id) {
        this.activeId = null;
        this.thread = [];
        this.threadOf = null;
        if (this.conversations.length > 0) await this.open(this.conversations[0].id);
      }
    });
  }

  async undoRemove() {
    const c = this.deleted;
    if (!c) return;
    this.deleted = null;
    await this.guard(async () => {
      await api.conversations.restore(c.id);
      await this.refreshList();
      await this.open(c.id);
    });
  }

  /** After a reply in `conversationId` ended: its error, the thread and the list. */
  private ended(conversationId: number) {
    return (error: string | null) => {
      if (error) this.error = error;
      // A reply that grew has other tokens now.
      this.tokenViews = {};
      void this.guard(async () => {
        if (this.activeId === conversationId) this.thread = await api.conversations.thread(conversationId);
        await this.refreshList();
      });
    };
  }

  /** Mid-stream, a reply ended in tool calls, a call changed, or the
   *  reply after them began: the thread shows it. */
  private progressed(conversationId: number) {
    return (notice?: string) => {
      if (notice) {
        this.toolNotice = notice;
        return;
      }
      void this.guard(async () => {
        if (this.activeId === conversationId) this.thread = await api.conversations.thread(conversationId);
      });
    };
  }

  /** The tool call waiting for approval in a conversation, by its id. */
  awaitingApproval(conversationId: number): string | null {
    return this.live.byConversation[conversationId]?.awaiting ?? null;
  }

  async decideTool(conversationId: number, callId: string, decision: ToolDecision) {
    await this.guard(() => api.chat.decideTool(conversationId, callId, decision));
  }

  async send(text: string): Promise<boolean> {
    let id = this.activeId;
    if (id === null) {
      await this.create();
      id = this.activeId;
      if (id === null) return false;
    }
    const conversationId = id;
    const variants = this.variantCount;
    const ok = await this.guard(async () => {
      const sent = await this.live.start(conversationId, { variants }, (on) => api.chat.send(conversationId, text, variants, on), this.ended(conversationId), this.progressed(conversationId));
      const s = this.streams[conversationId];
      if (s) {
        s.replyId = sent.reply!.id;
        sent.variants.forEach((v, i) => s.variants[i] && (s.variants[i].replyId = v.id));
      }
      if (this.activeId === conversationId) this.thread = await api.conversations.thread(conversationId);
      await this.refreshList();
      return true;
    });
    return ok === true;
  }

  /** Writes another version of a reply, or `variantCount` of them side by side. */
  async regenerate(replyId: number) {
    const conversationId = this.activeId!;
    const variants = this.variantCount;
    await this.guard(async () => {
      const [reply, ...others] = await this.live.start(conversationId, { variants }, (on) => api.chat.regenerate(conversationId, replyId, variants, on), this.ended(conversationId), this.progressed(conversationId));
      const s = this.streams[conversationId];
      if (s) {
        s.replyId = reply.id;
        others.forEach((v, i) => s.variants[i] && (s.variants[i].replyId = v.id));
      }
      this.thread = await api.conversations.thread(conversationId);
    });
  }

  async edit(messageId: number, text: string, isUser: boolean) {
    const conversationId = this.activeId!;
    await this.guard(async () => {
      if (isUser) {
        const sent = await this.live.start(conversationId, {}, (on) => api.chat.edit(conversationId, messageId, text, on), this.ended(conversationId), this.progressed(conversationId));
        if (sent.reply && this.streams[conversationId]) this.streams[conversationId].replyId = sent.reply.id;
      } else {
        // An edited reply is kept as written: no stream.
        await api.chat.edit(conversationId, messageId, text, () => {});
      }
      this.thread = await api.conversations.thread(conversationId);
    });
  }

  async continueReply(replyId: number) {
    const conversationId = this.activeId!;
    const existing = this.thread.find((t) => t.message.id === replyId)?.message.content ?? '';
    await this.guard(async () => {
      await this.live.start(conversationId, { replyId, text: existing }, (on) => api.chat.continue(conversationId, replyId, on), this.ended(conversationId));
      this.thread = await api.conversations.thread(conversationId);
    });
  }

  async stop() {
    if (this.activeId === null) return;
    const id = this.activeId;
    await this.guard(() => api.chat.stop(id));
  }

  async selectVersion(messageId: number) {
    const id = this.activeId!;
    await this.guard(async () => {
      this.thread = await api.conversations.selectVersion(id, messageId);
    });
  }

  /** Runs a recorded reply again; `replays` says how it went. */
  async replay(replyId: number) {
    const conversationId = this.activeId!;
    const recorded = this.thread.find((t) => t.message.id === replyId)?.message.stats?.replay?.tokens.length ?? 0;
    await this.live.replay(conversationId, replyId, recorded, (on) => api.chat.replay(conversationId, replyId, on));
  }

  /** Loads a reply's tokens and their alternatives. */
  async loadTokens(replyId: number) {
    const conversationId = this.activeId!;
    await this.guard(async () => {
      this.tokenViews[replyId] = await api.chat.tokenChoices(conversationId, replyId);
    });
  }

  /** A new version of a reply that takes `token` at `index` and goes on from there. */
  async continueWith(replyId: number, index: number, token: number) {
    const conversationId = this.activeId!;
    await this.guard(async () => {
      const branch = await this.live.start(conversationId, {}, (on) => api.chat.continueWith(conversationId, replyId, index, token, on), this.ended(conversationId));
      const s = this.streams[conversationId];
      if (s) {
        // The kept text comes first; tokens may already have streamed after it.
        s.replyId = branch.id;
        s.text = branch.content + s.text;
      }
      this.thread = await api.conversations.thread(conversationId);
    });
  }

  /** Writes a reply's record to `path` for `hearth-cli replay`. */
  async exportReplay(replyId: number, path: string) {
    const conversationId = this.activeId!;
    await this.guard(() => api.chat.exportReplay(conversationId, replyId, path));
  }

  /** Writes a conversation to `path`: Markdown of the shown branch, the
   *  whole tree as JSON, or a `.hearth` bundle with its KV cache. */
  async exportConversation(id: number, format: ExportFormat, path: string): Promise<boolean> {
    const ok = await this.guard(async () => {
      await api.conversations.exportTo(id, format, path);
      return true;
    });
    if (ok) this.notice = { kind: 'export', text: `Exported to ${path}` };
    return ok === true;
  }

  /** Writes every conversation to one JSON file at `path`. */
  async backup(path: string): Promise<number | undefined> {
    const n = await this.guard(() => api.conversations.backup(path));
    if (n !== undefined) this.notice = { kind: 'backup', text: `Backed up ${n} conversation${n === 1 ? '' : 's'} to ${path}` };
    return n;
  }

  /** Imports the conversations in the file at `path` (a JSON export, a
   *  backup, a plain message list or a `.hearth` bundle), then shows the
   *  list with them and opens the first. A refused file changes nothing
   *  and its error is shown. */
  async importFrom(path: string): Promise<ImportResult | undefined> {
    this.notice = null;
    const result = await this.guard(() => api.conversations.importFrom(path));
    if (!result) return undefined;
    this.notice = { kind: 'import', text: importInWords(result) };
    await this.guard(async () => {
      await this.refreshList();
      if (result.conversationIds.length > 0) await this.open(result.conversationIds[0]);
    });
    return result;
  }

  /** How full the context would be if `draft` were sent now in the conversation. */
  contextUsage(conversationId: number, draft: string): Promise<ContextUsage> {
    return api.chat.contextUsage(conversationId, draft);
  }

  /** Validates and, when every field is valid, saves the open conversation's settings. */
  async updateSettings(next: ConversationSettings) {
    if (this.activeId !== null) await this.settings.update(this.activeId, next);
  }

  async savePreset(name: string) {
    const settings = this.activeSettings;
    if (settings) await this.settings.savePreset(name, settings);
  }

  async applyPreset(name: string) {
    if (this.activeId !== null) await this.settings.applyPreset(this.activeId, name);
  }
}

export const app = new AppState();
