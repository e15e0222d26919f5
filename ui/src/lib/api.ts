// Typed calls to the shell's commands. Every failure is an AppError
// ({kind, message}); generation events stream over a Channel.
import { Channel, invoke } from '@tauri-apps/api/core';
import type { ApiServerState } from './bindings/ApiServerState';
import type { AddedEndpoint } from './bindings/AddedEndpoint';
import type { AppError } from './bindings/AppError';
import type { Backend } from './bindings/Backend';
import type { Endpoint } from './bindings/Endpoint';
import type { CacheBudgets } from './bindings/CacheBudgets';
import type { Conversation } from './bindings/Conversation';
import type { ConversationCache } from './bindings/ConversationCache';
import type { ContextUsage } from './bindings/ContextUsage';
import type { ConversationSettings } from './bindings/ConversationSettings';
import type { DownloadEvent } from './bindings/DownloadEvent';
import type { FieldError } from './bindings/FieldError';
import type { GenerationEvent } from './bindings/GenerationEvent';
import type { ImportResult } from './bindings/ImportResult';
import type { Message } from './bindings/Message';
import type { ModelStatus } from './bindings/ModelStatus';
import type { Preset } from './bindings/Preset';
import type { RecentModel } from './bindings/RecentModel';
import type { LibraryModel } from './bindings/LibraryModel';
import type { SearchHit } from './bindings/SearchHit';
import type { StartupError } from './bindings/StartupError';
import type { Sent } from './bindings/Sent';
import type { ThreadMessage } from './bindings/ThreadMessage';
import type { TokenView } from './bindings/TokenView';

export type OnEvent = (event: GenerationEvent) => void;

/** How a conversation is exported: Markdown of the shown branch, the whole
 *  tree as JSON, or a `.hearth` bundle (the JSON, the KV cache and the
 *  model's identity). */
export type ExportFormat = 'markdown' | 'json' | 'bundle';

/** Whatever a command threw, as an AppError. */
export function asAppError(e: unknown): AppError {
  if (e && typeof e === 'object' && 'kind' in e && 'message' in e) return e as AppError;
  return { kind: 'internal', message: String(e) };
}

function channel(onEvent: OnEvent): Channel<GenerationEvent> {
  const ch = new Channel<GenerationEvent>();
  ch.onmessage = onEvent;
  return ch;
}

export const api = {
  app: {
    startupError: () => invoke<StartupError | null>('app_startup_error'),
    moveDatabaseAside: () => invoke<string>('app_move_database_aside'),
  },
  conversations: {
    list: () => invoke<Conversation[]>('conversations_list'),
    search: (query: string) => invoke<SearchHit[]>('conversations_search', { query }),
    create: () => invoke<Conversation>('conversations_create'),
    rename: (id: number, title: string) => invoke<Conversation>('conversations_rename', { id, title }),
    delete: (id: number) => invoke<void>('conversations_delete', { id }),
    restore: (id: number) => invoke<Conversation>('conversations_restore', { id }),
    thread: (id: number) => invoke<ThreadMessage[]>('conversations_thread', { id }),
    cacheStates: () => invoke<ConversationCache[]>('conversations_cache_states'),
    selectVersion: (id: number, messageId: number) =>
      invoke<ThreadMessage[]>('conversations_select_version', { id, messageId }),
    backend: (id: number) => invoke<Backend>('conversations_backend', { id }),
    setBackend: (id: number, backend: Backend) => invoke<void>('conversations_set_backend', { id, backend }),
    exportTo: (id: number, format: ExportFormat, path: string) => invoke<null>('conversations_export', { id, format, path }),
    /** Every conversation in one JSON file; how many were written. */
    backup: (path: string) => invoke<number>('conversations_backup', { path }),
    /** A JSON export, a backup, a plain `[{role, content}]` list or a `.hearth` bundle. */
    importFrom: (path: string) => invoke<ImportResult>('conversations_import', { path }),
  },
  endpoints: {
    list: () => invoke<Endpoint[]>('endpoints_list'),
    add: (name: string, baseUrl: string, apiKey: string | null, allowPlainText: boolean) =>
      invoke<AddedEndpoint>('endpoints_add', { name, baseUrl, apiKey, allowPlainText }),
    setKey: (id: number, apiKey: string | null, allowPlainText: boolean) =>
      invoke<Endpoint>('endpoints_set_key', { id, apiKey, allowPlainText }),
    models: (id: number) => invoke<string[]>('endpoints_models', { id }),
    remove: (id: number) => invoke<void>('endpoints_remove', { id }),
  },
  chat: {
    send: (conversationId: number, text: string, variants: number, onEvent: OnEvent) =>
      invoke<Sent>('chat_send', { conversationId, text, variants, onEvent: channel(onEvent) }),
    regenerate: (conversationId: number, replyId: number, variants: number, onEvent: OnEvent) =>
      invoke<Message[]>('chat_regenerate', { conversationId, replyId, variants, onEvent: channel(onEvent) }),
    edit: (conversationId: number, messageId: number, text: string, onEvent: OnEvent) =>
      invoke<Sent>('chat_edit', { conversationId, messageId, text, onEvent: channel(onEvent) }),
    continue: (conversationId: number, replyId: number, onEvent: OnEvent) =>
      invoke<Message>('chat_continue', { conversationId, replyId, onEvent: channel(onEvent) }),
    replay: (conversationId: number, replyId: number, onEvent: OnEvent) =>
      invoke<void>('chat_replay', { conversationId, replyId, onEvent: channel(onEvent) }),
    exportReplay: (conversationId: number, replyId: number, path: string) =>
      invoke<void>('chat_export_replay', { conversationId, replyId, path }),
    tokenChoices: (conversationId: number, replyId: number) =>
      invoke<TokenView[]>('chat_token_choices', { conversationId, replyId }),
    continueWith: (conversationId: number, replyId: number, index: number, token: number, onEvent: OnEvent) =>
      invoke<Message>('chat_continue_with', { conversationId, replyId, index, token, onEvent: channel(onEvent) }),
    stop: (conversationId: number) => invoke<boolean>('chat_stop', { conversationId }),
    busy: () => invoke<number[]>('chat_busy'),
    contextUsage: (conversationId: number, draft: string) =>
      invoke<ContextUsage>('chat_context_usage', { conversationId, draft }),
  },
  settings: {
    get: (conversationId: number) => invoke<ConversationSettings>('settings_get', { conversationId }),
    set: (conversationId: number, settings: ConversationSettings) =>
      invoke<void>('settings_set', { conversationId, settings }),
    validate: (settings: ConversationSettings) => invoke<FieldError[]>('settings_validate', { settings }),
    defaults: () => invoke<ConversationSettings>('settings_defaults_get'),
    setDefaults: (settings: ConversationSettings) => invoke<void>('settings_defaults_set', { settings }),
    presets: () => invoke<Preset[]>('presets_list'),
    savePreset: (preset: Preset) => invoke<Preset[]>('presets_save', { preset }),
    deletePreset: (name: string) => invoke<Preset[]>('presets_delete', { name }),
    clearCaches: () => invoke<void>('caches_clear'),
    budgets: () => invoke<CacheBudgets>('caches_budgets_get'),
    setBudgets: (budgets: CacheBudgets) => invoke<void>('caches_budgets_set', { budgets }),
    device: () => invoke<string>('device_get'),
    setDevice: (device: string) => invoke<void>('device_set', { device }),
    apiServer: () => invoke<ApiServerState>('api_server_get'),
    setApiServer: (enabled: boolean, port: number) => invoke<ApiServerState>('api_server_set', { enabled, port }),
    newApiKey: () => invoke<ApiServerState>('api_server_new_key'),
  },
  models: {
    status: () => invoke<ModelStatus>('models_status'),
    open: (path: string) => invoke<void>('models_open', { path }),
    recent: () => invoke<RecentModel[]>('models_recent'),
    /** The models opened before, with their header facts (or why they cannot be read). */
    library: () => invoke<LibraryModel[]>('models_library'),
    /** Removes a model from the list; deletes its file only when `deleteFile`. */
    forget: (path: string, deleteFile: boolean) => invoke<void>('models_forget', { path, deleteFile }),
    downloadDefault: (onEvent: (e: DownloadEvent) => void) => {
      const ch = new Channel<DownloadEvent>();
      ch.onmessage = onEvent;
      return invoke<void>('models_download_default', { onEvent: ch });
    },
    cancelDownload: () => invoke<boolean>('models_download_cancel'),
  },
};
