// Settings: each conversation's sampling settings by conversation id, with
// the field errors of an edit; presets; and the app's cache budgets,
// compute device and local API server.
import { api, asAppError } from './api';
import type { ApiServerState } from './bindings/ApiServerState';
import type { CacheBudgets } from './bindings/CacheBudgets';
import type { ConversationSettings } from './bindings/ConversationSettings';
import type { Preset } from './bindings/Preset';

/** Runs a command, showing its error in words instead of throwing. */
export type Guard = <T>(f: () => Promise<T>) => Promise<T | undefined>;

export class SettingsStore {
  /** Each opened conversation's settings, by conversation id. */
  byConversation = $state<Record<number, ConversationSettings>>({});
  /** The field errors of each conversation's settings as last edited. */
  fieldErrors = $state<Record<number, Record<string, string>>>({});
  presets = $state<Preset[]>([]);
  budgets = $state<CacheBudgets | null>(null);
  device = $state<string | null>(null);
  /** The local API server's switch, port, key and URL while it runs. */
  apiServer = $state<ApiServerState | null>(null);

  constructor(private guard: Guard) {}

  async loadPresets() {
    this.presets = await api.settings.presets();
  }

  /** Keeps `settings` as the conversation's, as just read. */
  show(conversationId: number, settings: ConversationSettings) {
    this.byConversation[conversationId] = settings;
    this.fieldErrors[conversationId] = {};
  }

  forget(conversationId: number) {
    delete this.byConversation[conversationId];
    delete this.fieldErrors[conversationId];
  }

  /** Each conversation's edits, saved one after another. */
  #saving: Record<number, Promise<unknown>> = {};
  /** Each conversation's latest edit. */
  #edits: Record<number, number> = {};

  /** Validates and, when every field is valid, saves the conversation's
   *  settings. Edits are saved in the order they were made, and one that a
   *  later edit has replaced before its turn is not saved at all: typing
   *  "40" edits twice, and the save of "4" must not land after that of "40"
   *  (the commands may finish in either order). */
  async update(conversationId: number, next: ConversationSettings) {
    this.byConversation[conversationId] = next;
    const edit = (this.#edits[conversationId] ?? 0) + 1;
    this.#edits[conversationId] = edit;
    const save = (this.#saving[conversationId] ?? Promise.resolve()).then(async () => {
      if (this.#edits[conversationId] !== edit) return;
      await this.guard(async () => {
        const errors = await api.settings.validate(next);
        this.fieldErrors[conversationId] = Object.fromEntries(errors.map((e) => [e.field, e.message]));
        if (errors.length === 0) await api.settings.set(conversationId, next);
      });
    });
    this.#saving[conversationId] = save.catch(() => undefined);
    await save;
  }

  async savePreset(name: string, settings: ConversationSettings) {
    await this.guard(async () => {
      this.presets = await api.settings.savePreset({ name, settings });
    });
  }

  async deletePreset(name: string) {
    await this.guard(async () => {
      this.presets = await api.settings.deletePreset(name);
    });
  }

  /** The preset's settings for `conversationId`, saved as an edit. */
  async applyPreset(conversationId: number, name: string) {
    const p = this.presets.find((x) => x.name === name);
    if (p) await this.update(conversationId, { ...p.settings, stopStrings: [...p.settings.stopStrings] });
  }

  async loadMachine() {
    try {
      this.budgets = await api.settings.budgets();
      this.device = await api.settings.device();
      this.apiServer = await api.settings.apiServer();
    } catch {
      // The panel shows what it has.
    }
  }

  /** Runs the model on `next` from now on; says why not, if it cannot. */
  async setDevice(next: string): Promise<string | null> {
    return refusal(async () => {
      await api.settings.setDevice(next);
      this.device = next;
    });
  }

  /** Counts changes to the API server, so a refresh read before one
   *  does not put back what it replaced. */
  private apiServerChanges = 0;

  /** The API server's state again (its clients' caches change with each request). */
  async refreshApiServer() {
    const changes = this.apiServerChanges;
    try {
      const state = await api.settings.apiServer();
      if (changes === this.apiServerChanges) this.apiServer = state;
    } catch {
      // The panel keeps what it showed.
    }
  }

  /** Turns the local API server on or off, or moves it to `port`; says
   * why not, if it cannot (a port in use leaves it off). */
  async setApiServer(enabled: boolean, port: number): Promise<string | null> {
    this.apiServerChanges++;
    const refused = await refusal(async () => {
      this.apiServer = await api.settings.setApiServer(enabled, port);
    });
    if (refused) this.apiServer = await api.settings.apiServer().catch(() => this.apiServer);
    return refused;
  }

  /** Replaces the API key (clients with the old one are refused). */
  async newApiKey(): Promise<string | null> {
    this.apiServerChanges++;
    return refusal(async () => {
      this.apiServer = await api.settings.newApiKey();
    });
  }

  /** Says why the budgets were refused, if they were. */
  async setBudgets(next: CacheBudgets): Promise<string | null> {
    return refusal(async () => {
      await api.settings.setBudgets(next);
      this.budgets = next;
    });
  }
}

/** Why `f` was refused, in words, or null when it went through. */
async function refusal(f: () => Promise<void>): Promise<string | null> {
  try {
    await f();
    return null;
  } catch (e) {
    return asAppError(e).message;
  }
}
