// Remote endpoints: the OpenAI-compatible servers the user added, their
// models, and which model each conversation runs on (by conversation id).
import { api, asAppError } from './api';
import type { Backend } from './bindings/Backend';
import type { Endpoint } from './bindings/Endpoint';
import type { Guard } from './settings.svelte';

export class EndpointStore {
  endpoints = $state<Endpoint[]>([]);
  /** Each endpoint's models, once listed; an error in words if listing failed. */
  models = $state<Record<number, string[] | string>>({});
  /** Each opened conversation's backend, by conversation id. */
  backends = $state<Record<number, Backend>>({});

  constructor(private guard: Guard) {}

  async load() {
    this.endpoints = await api.endpoints.list();
  }

  /** Lists every endpoint's models (for the model bar's choice). */
  async loadModels() {
    await Promise.all(
      this.endpoints.map(async (e) => {
        try {
          this.models[e.id] = await api.endpoints.models(e.id);
        } catch (err) {
          this.models[e.id] = asAppError(err).message;
        }
      }),
    );
  }

  /** Adds an endpoint once it answers with its models; says why not, if it does not. */
  async add(name: string, baseUrl: string, apiKey: string, allowPlainText: boolean): Promise<string | null> {
    try {
      const added = await api.endpoints.add(name, baseUrl, apiKey.trim() || null, allowPlainText);
      this.endpoints = [...this.endpoints, added.endpoint];
      this.models[added.endpoint.id] = added.models;
      return null;
    } catch (e) {
      return asAppError(e).message;
    }
  }

  async setKey(id: number, apiKey: string, allowPlainText: boolean): Promise<string | null> {
    try {
      const updated = await api.endpoints.setKey(id, apiKey.trim() || null, allowPlainText);
      this.endpoints = this.endpoints.map((e) => (e.id === id ? updated : e));
      return null;
    } catch (e) {
      return asAppError(e).message;
    }
  }

  async remove(id: number) {
    await this.guard(async () => {
      await api.endpoints.remove(id);
      this.endpoints = this.endpoints.filter((e) => e.id !== id);
      for (const [c, b] of Object.entries(this.backends)) {
        if (b.kind === 'remote' && b.endpointId === id) this.backends[Number(c)] = { kind: 'local' };
      }
    });
  }

  async loadBackend(conversationId: number) {
    this.backends[conversationId] = await api.conversations.backend(conversationId);
  }

  async setBackend(conversationId: number, backend: Backend) {
    await this.guard(async () => {
      await api.conversations.setBackend(conversationId, backend);
      this.backends[conversationId] = backend;
    });
  }

  /** The endpoint a backend names, if it is remote. */
  endpointOf(backend: Backend | undefined): Endpoint | undefined {
    return backend?.kind === 'remote' ? this.endpoints.find((e) => e.id === backend.endpointId) : undefined;
  }
}

/** Where a key is kept, in words. */
export function keyStorageWords(e: Endpoint): string {
  switch (e.keyStorage) {
    case 'none':
      return 'no key';
    case 'keychain':
      return 'key in the system keychain';
    case 'session':
      return 'key kept until Hearth closes (no keychain here)';
    case 'database':
      return "key in Hearth's database, unencrypted";
  }
}
