// The UI's state: conversations, the shown thread, replies streaming in any
// conversation, the model, and the open conversation's settings. Components
// read it and call its methods; only this file talks to the shell.
import { api, asAppError, type OnEvent } from './api';
import type { CacheState } from './bindings/CacheState';
import type { Conversation } from './bindings/Conversation';
import type { ConversationSettings } from './bindings/ConversationSettings';
import type { GenerationEvent } from './bindings/GenerationEvent';
import type { ModelStatus } from './bindings/ModelStatus';
import type { Preset } from './bindings/Preset';
import type { RecentModel } from './bindings/RecentModel';
import type { ReplayOutcome } from './bindings/ReplayOutcome';
import type { SearchHit } from './bindings/SearchHit';
import type { ThreadMessage } from './bindings/ThreadMessage';
import type { TokenView } from './bindings/TokenView';

/** A reply being written, in any conversation. */
export interface Stream {
  replyId: number;
  text: string;
  /** Position in the queue while waiting; 0 once started. */
  queuePosition: number;
  started: boolean;
  tokens: number;
  /** How far the prompt has been read, once the reply has started. */
  prefill: { done: number; total: number } | null;
  /** The other replies written beside this one ("Generate N"), in order. */
  variants: { replyId: number; text: string; tokens: number }[];
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

export class AppState {
  conversations = $state<Conversation[]>([]);
  /** Where each conversation's KV cache is: memory, disk, or nowhere. */
  cacheStates = $state<Record<number, CacheState>>({});
  searchQuery = $state('');
  searchHits = $state<SearchHit[] | null>(null);
  activeId = $state<number | null>(null);
  thread = $state<ThreadMessage[]>([]);
  streams = $state<Record<number, Stream>>({});
  replays = $state<Record<number, Replay>>({});
  model = $state<ModelStatus>({ state: 'none' });
  recentModels = $state<RecentModel[]>([]);
  settings = $state<ConversationSettings | null>(null);
  fieldErrors = $state<Record<string, string>>({});
  presets = $state<Preset[]>([]);
  /** The default model's download, while one runs or after it failed. */
  download = $state<{ downloaded: number; total: number | null; extracting: boolean; error: string | null } | null>(null);
  /** Replies' tokens with their alternatives, by reply id, once asked for. */
  tokenViews = $state<Record<number, TokenView[]>>({});
  /** Token views shade each token by how unlikely the model found it. */
  shadeTokens = $state(true);
  /** How many replies a send writes at once ("Generate N"). */
  variantCount = $state(1);
  /** The last deleted conversation, while its undo is offered. */
  deleted = $state<Conversation | null>(null);
  error = $state<string | null>(null);

  get active(): Conversation | undefined {
    return this.conversations.find((c) => c.id === this.activeId);
  }

  get activeStream(): Stream | undefined {
    return this.activeId === null ? undefined : this.streams[this.activeId];
  }

  /** The open conversation is writing a reply or replaying one. */
  get activeBusy(): boolean {
    if (this.activeId === null) return false;
    const r = this.replays[this.activeId];
    return !!this.streams[this.activeId] || (!!r && !r.done);
  }

  /** Tokens received but not yet shown, by conversation. They reach the
   *  page in an animation frame at most every `FRAME_MS`, however fast
   *  they arrive: each update costs the webview a layout and a paint, and
   *  on a machine with few cores that time comes out of the model's. */
  private pendingTokens = new Map<number, Map<number, { text: string; tokens: number }>>();
  private flushQueued = false;
  private lastFlush = 0;

  private flushTokens = () => {
    this.flushQueued = false;
    this.lastFlush = performance.now();
    for (const [id, byVariant] of this.pendingTokens) {
      const s = this.streams[id];
      if (!s) continue;
      for (const [variant, p] of byVariant) {
        const target = variant === 0 ? s : s.variants[variant - 1];
        if (!target) continue;
        target.text += p.text;
        target.tokens += p.tokens;
      }
    }
    this.pendingTokens.clear();
  };

  private queueTokens(conversationId: number, variant: number, text: string, tokens: number) {
    let byVariant = this.pendingTokens.get(conversationId);
    if (!byVariant) this.pendingTokens.set(conversationId, (byVariant = new Map()));
    const p = byVariant.get(variant);
    if (p) {
      p.text += text;
      p.tokens += tokens;
    } else {
      byVariant.set(variant, { text, tokens });
    }
    if (this.flushQueued) return;
    this.flushQueued = true;
    const wait = Math.max(0, this.lastFlush + FRAME_MS - performance.now());
    const inFrame = () => (typeof requestAnimationFrame === 'function' ? requestAnimationFrame(this.flushTokens) : setTimeout(this.flushTokens, 0));
    if (wait > 0) setTimeout(inFrame, wait);
    else inFrame();
  }

  /** Counts model-status events, so a status query answered late cannot undo a newer event. */
  private statusEvents = 0;

  /** Call after subscribing to model-status events. */
  async init() {
    await this.guard(async () => {
      const seen = this.statusEvents;
      const status = await api.models.status();
      if (this.statusEvents === seen) this.model = status;
      this.recentModels = await api.models.recent();
      this.presets = await api.settings.presets();
      this.conversations = await api.conversations.list();
      void this.refreshCaches();
      if (this.conversations.length > 0) await this.open(this.conversations[0].id);
    });
  }

  setModel(status: ModelStatus) {
    this.statusEvents += 1;
    this.model = status;
    if (status.state === 'ready') void api.models.recent().then((r) => (this.recentModels = r));
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
    await this.guard(async () => {
      this.activeId = id;
      const [thread, settings] = await Promise.all([api.conversations.thread(id), api.settings.get(id)]);
      if (this.activeId !== id) return;
      this.thread = thread;
      this.settings = settings;
      this.fieldErrors = {};
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
      delete this.streams[id];
      this.deleted = c;
      this.conversations = this.conversations.filter((x) => x.id !== id);
      if (this.searchHits) this.searchHits = this.searchHits.filter((h) => h.conversation.id !== id);
      if (this.activeId === id) {
        this.activeId = null;
        this.thread = [];
        this.settings = null;
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

  /** Routes one conversation's generation events into its stream. */
  private listener(conversationId: number): OnEvent {
    return (event: GenerationEvent) => {
      const s = this.streams[conversationId];
      switch (event.event) {
        case 'queued':
          if (s) s.queuePosition = event.data.position;
          break;
        case 'started':
          if (s) {
            s.started = true;
            s.queuePosition = 0;
          }
          break;
        case 'prefill':
          if (s) s.prefill = { done: event.data.done, total: event.data.total };
          break;
        case 'tokens':
          if (s) this.queueTokens(conversationId, event.data.variant, event.data.text, event.data.ids.length);
          break;
        case 'finished':
        case 'error':
          this.flushTokens();
          if (event.event === 'error') this.error = event.data.error.message;
          delete this.streams[conversationId];
          void this.afterReply(conversationId);
          break;
      }
    };
  }

  private async afterReply(conversationId: number) {
    await this.guard(async () => {
      if (this.activeId === conversationId) this.thread = await api.conversations.thread(conversationId);
      await this.refreshList();
    });
  }

  private beginStream(conversationId: number, replyId: number, text = '', variants = 1) {
    this.streams[conversationId] = {
      replyId, text, queuePosition: 0, started: false, tokens: 0, prefill: null,
      variants: Array.from({ length: variants - 1 }, () => ({ replyId: -1, text: '', tokens: 0 })),
    };
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
      // Events may arrive before the command returns: open the stream first.
      this.beginStream(conversationId, -1, '', variants);
      try {
        const sent = await api.chat.send(conversationId, text, variants, this.listener(conversationId));
        const s = this.streams[conversationId];
        if (s) {
          s.replyId = sent.reply!.id;
          sent.variants.forEach((v, i) => s.variants[i] && (s.variants[i].replyId = v.id));
        }
      } catch (e) {
        delete this.streams[conversationId];
        throw e;
      }
      if (this.activeId === conversationId) this.thread = await api.conversations.thread(conversationId);
      await this.refreshList();
      return true;
    });
    return ok === true;
  }

  async regenerate(replyId: number) {
    const conversationId = this.activeId!;
    await this.guard(async () => {
      this.beginStream(conversationId, -1);
      try {
        const [reply] = await api.chat.regenerate(conversationId, replyId, 1, this.listener(conversationId));
        if (this.streams[conversationId]) this.streams[conversationId].replyId = reply.id;
      } catch (e) {
        delete this.streams[conversationId];
        throw e;
      }
      this.thread = await api.conversations.thread(conversationId);
    });
  }

  async edit(messageId: number, text: string, isUser: boolean) {
    const conversationId = this.activeId!;
    await this.guard(async () => {
      if (isUser) this.beginStream(conversationId, -1);
      try {
        const sent = await api.chat.edit(conversationId, messageId, text, this.listener(conversationId));
        if (sent.reply && this.streams[conversationId]) this.streams[conversationId].replyId = sent.reply.id;
      } catch (e) {
        delete this.streams[conversationId];
        throw e;
      }
      this.thread = await api.conversations.thread(conversationId);
    });
  }

  async continueReply(replyId: number) {
    const conversationId = this.activeId!;
    const existing = this.thread.find((t) => t.message.id === replyId)?.message.content ?? '';
    await this.guard(async () => {
      this.beginStream(conversationId, replyId, existing);
      try {
        await api.chat.continue(conversationId, replyId, this.listener(conversationId));
      } catch (e) {
        delete this.streams[conversationId];
        throw e;
      }
      this.thread = await api.conversations.thread(conversationId);
    });
  }

  /** Runs a recorded reply again; `replays` says how it went. */
  async replay(replyId: number) {
    const conversationId = this.activeId!;
    const recorded = this.thread.find((t) => t.message.id === replyId)?.message.stats?.replay?.tokens.length ?? 0;
    this.replays[conversationId] = { replyId, tokens: 0, recorded, done: false, outcome: null, error: null };
    const r = this.replays[conversationId];
    await this.guard(async () => {
      try {
        await api.chat.replay(conversationId, replyId, (event) => {
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
    });
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
      this.beginStream(conversationId, -1);
      try {
        const branch = await api.chat.continueWith(conversationId, replyId, index, token, this.listener(conversationId));
        const s = this.streams[conversationId];
        if (s) {
          // The kept text comes first; tokens may already have streamed after it.
          s.replyId = branch.id;
          s.text = branch.content + s.text;
        }
      } catch (e) {
        delete this.streams[conversationId];
        throw e;
      }
      this.thread = await api.conversations.thread(conversationId);
    });
  }

  /** Writes a reply's record to `path` for `hearth-cli replay`. */
  async exportReplay(replyId: number, path: string) {
    const conversationId = this.activeId!;
    await this.guard(() => api.chat.exportReplay(conversationId, replyId, path));
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

  /** Validates and, when every field is valid, saves the settings. */
  async updateSettings(next: ConversationSettings) {
    this.settings = next;
    const id = this.activeId;
    await this.guard(async () => {
      const errors = await api.settings.validate(next);
      this.fieldErrors = Object.fromEntries(errors.map((e) => [e.field, e.message]));
      if (errors.length === 0 && id !== null) await api.settings.set(id, next);
    });
  }

  async savePreset(name: string) {
    if (!this.settings) return;
    const settings = this.settings;
    await this.guard(async () => {
      this.presets = await api.settings.savePreset({ name, settings });
    });
  }

  async deletePreset(name: string) {
    await this.guard(async () => {
      this.presets = await api.settings.deletePreset(name);
    });
  }

  async applyPreset(name: string) {
    const p = this.presets.find((x) => x.name === name);
    if (p) await this.updateSettings({ ...p.settings, stopStrings: [...p.settings.stopStrings] });
  }

  async downloadDefaultModel() {
    this.download = { downloaded: 0, total: null, extracting: false, error: null };
    const d = this.download;
    await this.guard(() =>
      api.models.downloadDefault((e) => {
        if (!this.download) return;
        switch (e.event) {
          case 'progress':
            this.download.downloaded = e.data.downloaded;
            this.download.total = e.data.total;
            break;
          case 'extracting':
            this.download.extracting = true;
            break;
          case 'done':
            this.download = null;
            break;
          case 'failed':
            this.download.error = e.data.error.message;
            break;
        }
      }),
    ).then(() => {
      if (this.error && this.download === d) this.download = null;
    });
  }

  async cancelDownload() {
    await this.guard(() => api.models.cancelDownload());
  }

  async openModel(path: string) {
    await this.guard(() => api.models.open(path));
  }
}

export const app = new AppState();
