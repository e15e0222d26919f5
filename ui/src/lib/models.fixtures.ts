// Test fixtures: what models_library reports for a few files.
import type { LibraryModel } from './bindings/LibraryModel';

/** The default model's header facts, as models_library reports them. */
export const smolFacts = {
  architecture: 'llama', supported: true, name: 'Smollm2 135M 8k Lc100K Mix1 Ep2', parameterCount: 134_515_008, tensorBytes: 96_576_768,
  activeParameterCount: 134_515_008, perLayerEmbeddingParameters: 0, expertCount: null, expertsUsed: null, bytesPerToken: 96_576_768,
  quantTypes: [
    { name: 'Q4_1', bytes: 66_355_200, fraction: 0.68707, tensors: 210 },
    { name: 'Q8_0', bytes: 30_081_024, fraction: 0.31147, tensors: 1 },
    { name: 'F32', bytes: 140_544, fraction: 0.00146, tensors: 61 },
  ],
  contextLength: 8192, fileSize: 98_362_432, nLayers: 30, nHeads: 9, nKvHeads: 3, headDim: 64, embeddingLength: 576,
  kvBytesPerToken: 23_040, recurrentStateBytes: 0, checkpointEvery: 512, maxCheckpoints: 16, memoryBytes: 96_576_768 + 23_040 * 8192,
};

export const library: LibraryModel[] = [
  { path: '/m/smol.gguf', name: 'smol', sizeBytes: 98_362_432, lastOpenedAt: 2, exists: true, source: null, facts: smolFacts, error: null },
  { path: '/m/cut.gguf', name: 'cut', sizeBytes: 10, lastOpenedAt: 1, exists: true, source: null, facts: null, error: { kind: 'badModel', message: 'model file /m/cut.gguf is truncated: tensor x is cut short' } },
  { path: '/m/gone.gguf', name: 'gone', sizeBytes: 10, lastOpenedAt: 0, exists: false, source: null, facts: null, error: { kind: 'badModel', message: 'cannot read model file /m/gone.gguf' } },
];
