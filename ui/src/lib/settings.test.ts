// Settings edits are saved in the order they were made: typing "40" edits
// twice, and the save of "4" must never land after that of "40".
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { afterEach, describe, expect, it } from 'vitest';
import type { ConversationSettings } from './bindings/ConversationSettings';
import { SettingsStore } from './settings.svelte';

const base: ConversationSettings = {
  systemPrompt: '', temperature: 0.7, topK: 40, topP: 0.95, minP: 0.05, repeatPenalty: 1, penaltyWindow: 64,
  maxNewTokens: 512, seed: null, stopStrings: [], contextLength: 0, overflow: 'stopAtLimit', thinking: true,
  reasoningEffort: 'medium', toolServers: [], toolUse: 'auto', speculation: 'auto', draftTokens: 8, draftModel: null,
};

describe('SettingsStore.update', () => {
  afterEach(() => clearMocks());

  it('saves the last edit last, even when an earlier edit validates slower', async () => {
    const saved: number[] = [];
    mockIPC(async (cmd, args) => {
      if (cmd === 'settings_validate') {
        const s = (args as { settings: ConversationSettings }).settings;
        // The first edit's check takes longer than the second's.
        await new Promise((r) => setTimeout(r, s.maxNewTokens === 4 ? 50 : 1));
        return [];
      }
      if (cmd === 'settings_set') {
        saved.push((args as { settings: ConversationSettings }).settings.maxNewTokens);
        return null;
      }
      throw new Error(`unexpected ${cmd}`);
    });
    const store = new SettingsStore(async (f) => f());
    const first = store.update(1, { ...base, maxNewTokens: 4 });
    const second = store.update(1, { ...base, maxNewTokens: 40 });
    await Promise.all([first, second]);
    expect(saved[saved.length - 1]).toBe(40);
    expect(store.byConversation[1].maxNewTokens).toBe(40);
  });
});
