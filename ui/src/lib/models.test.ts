import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { afterEach, describe, expect, it } from 'vitest';
import { library, smolFacts } from './models.fixtures';
import { bytesInWords, contextFor, memoryInWords, ModelStore, modelFileName, parametersInWords, paramsInWords, recurrentAt, sharesInWords } from './models.svelte';

function store() {
  const errors: string[] = [];
  const s = new ModelStore(async (f) => {
    try {
      return await f();
    } catch (e) {
      errors.push((e as { message: string }).message);
      return undefined;
    }
  });
  return { s, errors };
}

describe('model facts in words', () => {
  it('says parameter counts, shares, sizes and memory as the view shows them', () => {
    expect(paramsInWords(134_515_008)).toBe('135M');
    expect(paramsInWords(268_098_176)).toBe('268M');
    expect(paramsInWords(1_544_000_000)).toBe('1.5B');
    expect(paramsInWords(7_241_732_096)).toBe('7.2B');
    expect(paramsInWords(70_553_706_496)).toBe('71B');
    expect(sharesInWords(smolFacts)).toBe('Q4_1 69% · Q8_0 31% · F32 <1%');
    expect(parametersInWords(smolFacts)).toBe('135M');
    const moe = { parameterCount: 30_532_122_624, activeParameterCount: 3_335_049_216, expertCount: 128, expertsUsed: 8, perLayerEmbeddingParameters: 0 };
    expect(parametersInWords(moe)).toBe('31B · 3.3B active (8 of 128 experts)');
    // Gemma 4 E2B: 5.1B parameters, 2.8B of them its per-layer table.
    const e2b = { parameterCount: 5_100_000_000, activeParameterCount: 2_300_000_000, expertCount: null, expertsUsed: null, perLayerEmbeddingParameters: 2_800_000_000 };
    expect(parametersInWords(e2b)).toBe('5.1B · 2.3B effective');
    expect(bytesInWords(98_362_432)).toBe('98.4 MB');
    expect(bytesInWords(4_920_000_000)).toBe('4.9 GB');
    expect(memoryInWords(smolFacts)).toBe('≈ 0.3 GB at 8,192 tokens');
    expect(memoryInWords(smolFacts, 0)).toBe('≈ 0.3 GB at 8,192 tokens');
    expect(memoryInWords(smolFacts, 2048)).toBe('≈ 0.1 GB at 2,048 tokens');
    // A conversation cannot run past the model's own context.
    expect(contextFor(smolFacts, 100_000)).toBe(8192);
    expect(modelFileName('/a/b/Qwen3-0.6B-Q8_0.gguf')).toBe('Qwen3-0.6B-Q8_0');
    expect(modelFileName('C:\\models\\x.GGUF')).toBe('x');
  });

  it("counts a hybrid model's recurrent state and its checkpoints in the memory", () => {
    // Qwen3.6-35B-A3B's proportions: 30 recurrent layers of 2.1 MB of state.
    const hybrid = { ...smolFacts, tensorBytes: 20e9, kvBytesPerToken: 20_480, recurrentStateBytes: 63e6, contextLength: 262_144 };
    expect(recurrentAt(smolFacts, 8192)).toBe(0);
    // The state, and a checkpoint per 512 positions of prompt: 1000 tokens keep two.
    expect(recurrentAt(hybrid, 1000)).toBe(63e6 * 3);
    expect(recurrentAt(hybrid, 200_000)).toBe(63e6 * 17);
    expect(memoryInWords(hybrid, 32_768)).toBe(`≈ ${Math.round((20e9 + 20_480 * 32_768 + 63e6 * 17) / 1e9)} GB at 32,768 tokens`);
  });
});

describe('ModelStore library', () => {
  afterEach(() => clearMocks());

  it('reads the library and forgets a model, deleting its file only when asked', async () => {
    const calls: { cmd: string; args: unknown }[] = [];
    mockIPC((cmd, args) => {
      calls.push({ cmd, args });
      if (cmd === 'models_library') return library;
      if (cmd === 'models_forget') return null;
      throw new Error(`unexpected ${cmd}`);
    });
    const { s } = store();
    await s.showLibrary();
    expect(s.libraryOpen).toBe(true);
    expect(s.library?.map((m) => m.path)).toEqual(['/m/smol.gguf', '/m/cut.gguf', '/m/gone.gguf']);
    expect(await s.forget('/m/cut.gguf', false)).toBe(true);
    expect(await s.forget('/m/gone.gguf', true)).toBe(true);
    expect(calls.filter((c) => c.cmd === 'models_forget').map((c) => c.args)).toEqual([
      { path: '/m/cut.gguf', deleteFile: false },
      { path: '/m/gone.gguf', deleteFile: true },
    ]);
    expect(s.library?.map((m) => m.path)).toEqual(['/m/smol.gguf']);
    s.hideLibrary();
    expect(s.libraryOpen).toBe(false);
  });

  it('keeps a model the shell refused to forget, and says why', async () => {
    mockIPC((cmd) => {
      if (cmd === 'models_library') return library;
      if (cmd === 'models_forget') throw { kind: 'busy', message: '/m/smol.gguf is the model in use; open another model before deleting it' };
      throw new Error(`unexpected ${cmd}`);
    });
    const { s, errors } = store();
    await s.loadLibrary();
    expect(await s.forget('/m/smol.gguf', true)).toBe(false);
    expect(errors).toEqual(['/m/smol.gguf is the model in use; open another model before deleting it']);
    expect(s.library).toHaveLength(3);
  });

  it('offers a conversation its own model until the user goes on with the loaded one', () => {
    const recent = [{ path: '/m/qwen.gguf', name: 'Qwen3', sizeBytes: 1, lastOpenedAt: 1, source: null }];
    mockIPC((cmd) => {
      if (cmd === 'models_recent') return recent;
      throw new Error(`unexpected ${cmd}`);
    });
    const { s } = store();
    s.recent = recent;
    expect(s.mismatch(1, '/m/qwen.gguf')).toBeNull(); // nothing loaded
    s.setStatus({ state: 'ready', path: '/m/smol.gguf', name: 'smol', architecture: 'llama', contextLength: 8192, device: 'cpu', reasoning: null });
    expect(s.mismatch(1, null)).toBeNull(); // no local reply yet
    expect(s.mismatch(1, '/m/smol.gguf')).toBeNull();
    expect(s.mismatch(1, '/m/qwen.gguf')).toEqual({ path: '/m/qwen.gguf', name: 'Qwen3', current: 'smol' });
    expect(s.mismatch(2, '/m/other.gguf')?.name).toBe('other');
    s.keepCurrent(1);
    expect(s.mismatch(1, '/m/qwen.gguf')).toBeNull();
    expect(s.mismatch(2, '/m/other.gguf')).not.toBeNull();
    // Another model loaded later: the choice was about the one loaded then.
    s.setStatus({ state: 'ready', path: '/m/third.gguf', name: 'third', architecture: 'llama', contextLength: 8192, device: 'cpu', reasoning: null });
    expect(s.mismatch(1, '/m/qwen.gguf')?.current).toBe('third');
  });
});
