#!/usr/bin/env node
// forward64.mjs: an independent float64 reference forward of a dense decoder-only HuggingFace
// checkpoint (llama, mistral, qwen2, qwen3), and the golden logits the shared oracle checkpoints
// carry (tests/data/models/README.md, "goldens.safetensors"), for RoPE scaling schemes and
// sliding-window attention that no transformers-made checkpoint of this project exercises.
//
// Written from the formulas of transformers 5's modeling code, sharing nothing with tpullm's C++
// (Node.js 20, no dependencies):
//   - LlamaModel / MistralModel / Qwen2Model / Qwen3Model: embedding, pre-norm decoder layers
//     (RMSNorm -> attention -> residual, RMSNorm -> SiLU(gate) * up -> down -> residual), final
//     RMSNorm, lm_head (tied to the embedding when tie_word_embeddings or no lm_head.weight);
//   - LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight (here all in float64; transformers rounds
//     the normalised row through float32, which is part of the ~1e-7..1e-6 gap to its goldens);
//   - apply_rotary_pos_emb with rotate_half (pairs (i, i + d/2)), cos/sin from inv_freq x position,
//     both multiplied by the rope type's attention factor;
//   - modeling_rope_utils: _compute_default_rope_parameters,
//     _compute_linear_scaling_rope_parameters, _compute_dynamic_ntk_parameters (with
//     dynamic_rope_update's rule: the default frequencies while the sequence fits
//     max_position_embeddings), _compute_llama3_parameters,
//     _compute_yarn_parameters (get_mscale, find_correction_dim/range, truncate,
//     linear_ramp_factor) and RotaryEmbeddingConfigMixin.standardize_rope_params (which key wins,
//     original_max_position_embeddings' default);
//   - eager_attention_forward: GQA (q head h reads kv head h / (heads / kv_heads)), scale
//     head_dim^-0.5, causal; sliding_window_overlay (masking_utils): key j is visible to query i
//     iff i - sliding_window < j <= i; which layers slide: MistralModel (every layer when
//     sliding_window is set), Qwen2Config / Qwen3Config (layer_types, else layers
//     >= max_window_layers when use_sliding_window).
// Everything is float64; RoPE's cos/sin come from float64 inv_freq. transformers computes its
// rotary tables in float32 even in a float64 model, so its goldens drift from a float64 forward
// as positions grow (about 1e-5 x max|logit| near position 300 at rope_theta 1e4); `check
// --rope-f32` rounds the tables as transformers does, to show that the rest agrees to ~1e-6.
// Tokens go through one at a time with a KV cache (keys after RoPE): the same logits as a
// whole-sequence causal forward, without recomputing the prefix at every decode step.
//
// Usage:
//   node forward64.mjs make OUT_DIR --case NAME   write a random checkpoint + its goldens
//   node forward64.mjs goldens DIR [--force]      (re)compute DIR/goldens.safetensors + .json
//                                                 (--force: even over another oracle's)
//   node forward64.mjs check DIR [--tol 1e-5] [--rope-f32]
//                                                 recompute DIR's goldens (its prompts, its decode
//                                                 tokens fed) and compare; exit 1 above tol
//   node forward64.mjs cases                      list the checkpoint cases
// Exit status: 0 done / within tol, 1 a check exceeded tol, 2 bad usage or input.

import fs from 'node:fs';
import path from 'node:path';
import process from 'node:process';

// ---------------------------------------------------------------------------------------------
// safetensors: u64 LE header length, JSON header {name: {dtype, shape, data_offsets}}, raw data.

function f16ToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

function decodeTensor(view, begin, dtype, count) {
  const out = dtype === 'I32' || dtype === 'I64' ? new Int32Array(count) : new Float64Array(count);
  const scratch = new DataView(new ArrayBuffer(4)); // bf16 = the high half of an f32
  for (let i = 0; i < count; ++i) {
    switch (dtype) {
      case 'F32': out[i] = view.getFloat32(begin + 4 * i, true); break;
      case 'F64': out[i] = view.getFloat64(begin + 8 * i, true); break;
      case 'BF16':
        scratch.setUint32(0, (view.getUint16(begin + 2 * i, true) << 16) >>> 0, true);
        out[i] = scratch.getFloat32(0, true);
        break;
      case 'F16': out[i] = f16ToFloat(view.getUint16(begin + 2 * i, true)); break;
      case 'I32': out[i] = view.getInt32(begin + 4 * i, true); break;
      case 'I64': out[i] = Number(view.getBigInt64(begin + 8 * i, true)); break;
      default: throw new Error(`unsupported dtype ${dtype}`);
    }
  }
  return out;
}

function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const headerLen = Number(view.getBigUint64(0, true));
  const header = JSON.parse(buf.subarray(8, 8 + headerLen).toString('utf8'));
  const base = 8 + headerLen;
  const tensors = new Map();
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const count = t.shape.reduce((a, b) => a * b, 1);
    tensors.set(name, {
      dtype: t.dtype, shape: t.shape,
      data: decodeTensor(view, base + t.data_offsets[0], t.dtype, count),
    });
  }
  return tensors;
}

// tensors: [{name, dtype: 'F32' | 'I32', shape, data}]; written in the given order.
function writeSafetensors(file, tensors, metadata) {
  const header = {};
  if (metadata) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    const bytes = t.data.length * 4;
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  while ((8 + Buffer.byteLength(json)) % 8 !== 0) json += ' ';
  const headerBytes = Buffer.from(json, 'utf8');
  const out = Buffer.alloc(8 + headerBytes.length + offset);
  out.writeBigUInt64LE(BigInt(headerBytes.length), 0);
  headerBytes.copy(out, 8);
  let pos = 8 + headerBytes.length;
  for (const t of tensors) {
    for (let i = 0; i < t.data.length; ++i, pos += 4) {
      if (t.dtype === 'F32') out.writeFloatLE(t.data[i], pos);
      else out.writeInt32LE(t.data[i], pos);
    }
  }
  fs.writeFileSync(file, out);
}

// ---------------------------------------------------------------------------------------------
// A seeded PRNG (splitmix64 on BigInt, fine at these sizes) and normal deviates (Box-Muller).

class Rng {
  constructor(seed) { this.state = BigInt.asUintN(64, BigInt(seed)); }
  nextU32() {
    this.state = BigInt.asUintN(64, this.state + 0x9e3779b97f4a7c15n);
    let z = this.state;
    z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
    z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
    z ^= z >> 31n;
    return Number(z >> 32n);
  }
  uniform() { return (this.nextU32() + 0.5) / 4294967296; } // in (0, 1)
  int(n) { return this.nextU32() % n; }
  normal() {
    const u = this.uniform(), v = this.uniform();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }
}

function seedOf(text) { // FNV-1a, 32 bits
  let h = 0x811c9dc5;
  for (const c of Buffer.from(text, 'utf8')) h = Math.imul(h ^ c, 0x01000193) >>> 0;
  return h;
}

// ---------------------------------------------------------------------------------------------
// Configuration: the model's shapes, its RoPE parameters and each layer's attention window.

const DENSE_FAMILIES = ['llama', 'mistral', 'qwen2', 'qwen3'];

function headDimOf(cfg) {
  return cfg.head_dim || Math.floor(cfg.hidden_size / cfg.num_attention_heads);
}

// RotaryEmbeddingConfigMixin.convert_rope_params_to_dict + standardize_rope_params: rope_scaling
// (transformers 4) or rope_parameters (transformers 5), rope_type (or its old name "type"),
// rope_theta from the dict else the config, original_max_position_embeddings for llama3 / yarn
// from the config's own field, else the dict, else max_position_embeddings.
function ropeParameters(cfg) {
  const rp = { ...(cfg.rope_scaling || cfg.rope_parameters || {}) };
  rp.rope_type = rp.rope_type ?? rp.type ?? 'default';
  rp.rope_theta = rp.rope_theta ?? cfg.rope_theta ?? 10000.0;
  const prf = rp.partial_rotary_factor ?? cfg.partial_rotary_factor ?? 1.0;
  if (prf !== 1.0) throw new Error(`partial_rotary_factor ${prf} is not supported`);
  if (['llama3', 'yarn', 'longrope'].includes(rp.rope_type)) {
    if (cfg.original_max_position_embeddings != null)
      rp.original_max_position_embeddings = cfg.original_max_position_embeddings;
    else rp.original_max_position_embeddings ??= cfg.max_position_embeddings;
  }
  return rp;
}

function defaultInvFreq(base, dim) {
  const inv = new Float64Array(dim / 2);
  for (let i = 0; i < dim / 2; ++i) inv[i] = 1.0 / base ** ((2 * i) / dim);
  return inv;
}

// _compute_linear_scaling_rope_parameters: inv_freq / factor (positions / factor).
function linearInvFreq(rp, dim) {
  return defaultInvFreq(rp.rope_theta, dim).map((f) => f / rp.factor);
}

// _compute_dynamic_ntk_parameters with seq_len = max(seq_len, max_position_embeddings), as
// dynamic_rope_update calls it: base * (factor * seq / max - (factor - 1))^(dim / (dim - 2)),
// which is the default base while the sequence fits. Longer sequences are not implemented.
function dynamicInvFreq(rp, dim, maxPos, seqLen) {
  if (seqLen > maxPos)
    throw new Error(`dynamic RoPE past max_position_embeddings (${seqLen} > ${maxPos}) ` +
                    'is not implemented');
  const seq = Math.max(seqLen, maxPos);
  const base = rp.rope_theta * ((rp.factor * seq) / maxPos - (rp.factor - 1)) ** (dim / (dim - 2));
  return defaultInvFreq(base, dim);
}

// _compute_llama3_parameters: wavelengths above original / low_freq_factor divided by factor,
// below original / high_freq_factor kept, smoothly interpolated in between (both ends included).
function llama3InvFreq(rp, dim) {
  const { factor, low_freq_factor: low, high_freq_factor: high } = rp;
  const old = rp.original_max_position_embeddings;
  const lowWavelen = old / low, highWavelen = old / high;
  return defaultInvFreq(rp.rope_theta, dim).map((f) => {
    const wavelen = (2 * Math.PI) / f;
    if (wavelen > lowWavelen) return f / factor;
    if (wavelen < highWavelen) return f;
    const smooth = (old / wavelen - low) / (high - low);
    return ((1 - smooth) * f) / factor + smooth * f;
  });
}

// get_mscale in _compute_yarn_parameters.
function yarnMscale(scale, mscale = 1) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * Math.log(scale) + 1.0;
}

// _compute_yarn_parameters: factor (default max_position_embeddings / original), the attention
// factor (explicit, else get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when
// both are set and non-zero, else get_mscale(factor)), the correction range from beta_fast
// (default 32) / beta_slow (default 1) over original_max_position_embeddings, floor/ceil unless
// truncate is false, then a linear ramp between interpolated (/ factor) and extrapolated
// frequencies.
function yarnInvFreq(rp, dim, maxPos) {
  const base = rp.rope_theta;
  const orig = rp.original_max_position_embeddings;
  const factor = rp.factor ?? maxPos / orig;
  let attentionFactor = rp.attention_factor;
  if (attentionFactor == null) {
    attentionFactor = rp.mscale && rp.mscale_all_dim
      ? yarnMscale(factor, rp.mscale) / yarnMscale(factor, rp.mscale_all_dim)
      : yarnMscale(factor);
  }
  const betaFast = rp.beta_fast || 32;
  const betaSlow = rp.beta_slow || 1;
  const truncate = 'truncate' in rp ? rp.truncate : true;
  const correctionDim = (rotations) =>
    (dim * Math.log(orig / (rotations * 2 * Math.PI))) / (2 * Math.log(base));
  let low = correctionDim(betaFast), high = correctionDim(betaSlow);
  if (truncate) {
    low = Math.floor(low);
    high = Math.ceil(high);
  }
  low = Math.max(low, 0);
  high = Math.min(high, dim - 1);
  if (low === high) high += 0.001; // linear_ramp_factor's guard
  const inv = new Float64Array(dim / 2);
  for (let i = 0; i < dim / 2; ++i) {
    const posFreq = base ** ((2 * i) / dim);
    const extrapolation = 1.0 / posFreq, interpolation = 1.0 / (factor * posFreq);
    const ramp = Math.min(Math.max((i - low) / (high - low), 0), 1);
    const extrapolationFactor = 1 - ramp;
    inv[i] = interpolation * (1 - extrapolationFactor) + extrapolation * extrapolationFactor;
  }
  return { inv, attentionFactor };
}

// (inv_freq, attention_factor) for a forward whose positions stay below seqLen.
function ropeFrequencies(rope, dim, maxPos, seqLen) {
  switch (rope.rope_type) {
    case 'default': return { inv: defaultInvFreq(rope.rope_theta, dim), attentionFactor: 1 };
    case 'linear': return { inv: linearInvFreq(rope, dim), attentionFactor: 1 };
    case 'dynamic': return { inv: dynamicInvFreq(rope, dim, maxPos, seqLen), attentionFactor: 1 };
    case 'llama3': return { inv: llama3InvFreq(rope, dim), attentionFactor: 1 };
    case 'yarn': return yarnInvFreq(rope, dim, maxPos);
    default: throw new Error(`rope_type '${rope.rope_type}' is not supported`);
  }
}

// Each layer's sliding window (a number) or null (full causal attention).
function layerWindows(cfg) {
  const n = cfg.num_hidden_layers;
  const family = cfg.model_type;
  let window = null;
  if (family === 'mistral' || family === 'mixtral') {
    // MistralConfig's default is 4096 (MixtralConfig's None) when the key is absent.
    const w = 'sliding_window' in cfg ? cfg.sliding_window : family === 'mistral' ? 4096 : null;
    window = typeof w === 'number' ? w : null;
  } else if (family === 'qwen2' || family === 'qwen3') {
    window = cfg.use_sliding_window && typeof cfg.sliding_window === 'number'
      ? cfg.sliding_window : null;
  }
  let types = cfg.layer_types;
  if (!Array.isArray(types)) {
    types = Array.from({ length: n }, (_, i) => {
      if (window === null) return 'full_attention';
      if (family === 'qwen2' || family === 'qwen3')
        return i >= (cfg.max_window_layers ?? 28) ? 'sliding_attention' : 'full_attention';
      return 'sliding_attention';
    });
  }
  if (types.length !== n) throw new Error(`layer_types has ${types.length} entries, not ${n}`);
  return types.map((t) => {
    if (t === 'full_attention') return null;
    if (t === 'sliding_attention') return window;
    throw new Error(`layer type '${t}' is not supported`);
  });
}

function resolveConfig(cfg) {
  if (!DENSE_FAMILIES.includes(cfg.model_type))
    throw new Error(`model_type '${cfg.model_type}' is not supported ` +
                    `(${DENSE_FAMILIES.join(', ')})`);
  if ((cfg.hidden_act ?? 'silu') !== 'silu') throw new Error(`hidden_act ${cfg.hidden_act}`);
  if (cfg.mlp_bias) throw new Error('mlp_bias is not supported');
  return {
    family: cfg.model_type,
    hidden: cfg.hidden_size,
    intermediate: cfg.intermediate_size,
    layers: cfg.num_hidden_layers,
    heads: cfg.num_attention_heads,
    kvHeads: cfg.num_key_value_heads ?? cfg.num_attention_heads,
    headDim: headDimOf(cfg),
    vocab: cfg.vocab_size,
    eps: cfg.rms_norm_eps ?? 1e-6,
    maxPos: cfg.max_position_embeddings,
    tied: cfg.tie_word_embeddings === true,
    rope: ropeParameters(cfg),
    windows: layerWindows(cfg),
  };
}

// ---------------------------------------------------------------------------------------------
// The model: weights widened to float64, and a forward with a KV cache (the keys after RoPE).

function loadModel(dir, configOverride) {
  const cfg = configOverride ?? JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  const spec = resolveConfig(cfg);
  const tensors = readSafetensors(path.join(dir, 'model.safetensors'));
  const get = (name, shape) => {
    const t = tensors.get(name);
    if (!t) throw new Error(`${dir}: missing tensor ${name}`);
    if (shape && t.shape.join(',') !== shape.join(','))
      throw new Error(`${name}: shape [${t.shape}] is not [${shape}]`);
    return t.data;
  };
  const opt = (name) => tensors.get(name)?.data ?? null;
  const { hidden: H, intermediate: I, heads, kvHeads, headDim: D, vocab: V } = spec;
  const layers = [];
  for (let l = 0; l < spec.layers; ++l) {
    const p = `model.layers.${l}.`, a = p + 'self_attn.';
    layers.push({
      inNorm: get(p + 'input_layernorm.weight', [H]),
      q: get(a + 'q_proj.weight', [heads * D, H]), qBias: opt(a + 'q_proj.bias'),
      k: get(a + 'k_proj.weight', [kvHeads * D, H]), kBias: opt(a + 'k_proj.bias'),
      v: get(a + 'v_proj.weight', [kvHeads * D, H]), vBias: opt(a + 'v_proj.bias'),
      o: get(a + 'o_proj.weight', [H, heads * D]), oBias: opt(a + 'o_proj.bias'),
      qNorm: spec.family === 'qwen3' ? get(a + 'q_norm.weight', [D]) : null,
      kNorm: spec.family === 'qwen3' ? get(a + 'k_norm.weight', [D]) : null,
      postNorm: get(p + 'post_attention_layernorm.weight', [H]),
      gate: get(p + 'mlp.gate_proj.weight', [I, H]),
      up: get(p + 'mlp.up_proj.weight', [I, H]),
      down: get(p + 'mlp.down_proj.weight', [H, I]),
      window: spec.windows[l],
    });
  }
  const embed = get('model.embed_tokens.weight', [V, H]);
  const tied = spec.tied || !tensors.has('lm_head.weight');
  const lmHead = tied ? embed : get('lm_head.weight', [V, H]);
  return { spec, cfg, embed, layers, norm: get('model.norm.weight', [H]), lmHead };
}

// y = x W^T (+ b), W stored [out, in].
function linear(x, w, b, outDim) {
  const inDim = x.length;
  const y = new Float64Array(outDim);
  for (let o = 0; o < outDim; ++o) {
    let s = 0;
    const row = o * inDim;
    for (let i = 0; i < inDim; ++i) s += x[i] * w[row + i];
    y[o] = b ? s + b[o] : s;
  }
  return y;
}

// RMSNorm over each `width`-wide slice of x (a whole row, or one head).
function rmsNorm(x, weight, eps, width = x.length) {
  const y = new Float64Array(x.length);
  for (let s = 0; s < x.length; s += width) {
    let ss = 0;
    for (let i = 0; i < width; ++i) ss += x[s + i] * x[s + i];
    const r = 1 / Math.sqrt(ss / width + eps);
    for (let i = 0; i < width; ++i) y[s + i] = weight[i] * (x[s + i] * r);
  }
  return y;
}

// rotate_half RoPE on every head of x in place: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin),
// with cos/sin already multiplied by the attention factor.
function applyRope(x, headDim, cos, sin) {
  const half = headDim / 2;
  for (let s = 0; s < x.length; s += headDim) {
    for (let i = 0; i < half; ++i) {
      const a = x[s + i], b = x[s + i + half];
      x[s + i] = a * cos[i] - b * sin[i];
      x[s + i + half] = b * cos[i] + a * sin[i];
    }
  }
}

// transformers' float32 inv_freq: 1 / base^(arange(0, dim, 2).float() / dim), each step rounded
// to float32 (the default type; other types: their float64 result rounded once).
function float32InvFreq(spec, inv) {
  const f = Math.fround, dim = spec.headDim;
  if (spec.rope.rope_type !== 'default') return inv.map(f);
  return inv.map((_, i) => f(1 / f(spec.rope.rope_theta ** f(f(2 * i) / f(dim)))));
}

const silu = (x) => x / (1 + Math.exp(-x));

class Forward {
  // ropeF32: round inv_freq, the angles and cos/sin through float32 as transformers' rotary
  // embedding does (a diagnosis of the gap to its goldens; the oracle itself stays float64).
  constructor(model, maxSeqLen, { ropeF32 = false } = {}) {
    this.model = model;
    const { spec } = model;
    const { inv, attentionFactor } =
      ropeFrequencies(spec.rope, spec.headDim, spec.maxPos, maxSeqLen);
    this.inv = ropeF32 ? float32InvFreq(spec, inv) : inv;
    this.ropeF32 = ropeF32;
    this.attentionFactor = attentionFactor;
    this.maxSeqLen = maxSeqLen;
  }

  newCache() {
    return { length: 0, layers: this.model.layers.map(() => ({ k: [], v: [] })) };
  }

  cosSin(pos) {
    const round = this.ropeF32 ? Math.fround : (v) => v;
    const half = this.inv.length;
    const cos = new Float64Array(half), sin = new Float64Array(half);
    for (let i = 0; i < half; ++i) {
      const angle = round(pos * this.inv[i]);
      cos[i] = round(round(Math.cos(angle)) * this.attentionFactor);
      sin[i] = round(round(Math.sin(angle)) * this.attentionFactor);
    }
    return { cos, sin };
  }

  // One token at position cache.length through every layer; returns its logits.
  step(token, cache) {
    const { spec, layers, embed } = this.model;
    const { hidden: H, headDim: D, heads, kvHeads, intermediate: I, eps } = spec;
    const pos = cache.length;
    if (pos >= this.maxSeqLen) throw new Error(`position ${pos} past ${this.maxSeqLen}`);
    if (token < 0 || token >= spec.vocab) throw new Error(`token ${token} outside the vocabulary`);
    const { cos, sin } = this.cosSin(pos);
    let x = embed.slice(token * H, (token + 1) * H);
    layers.forEach((L, l) => {
      const h = rmsNorm(x, L.inNorm, eps);
      let q = linear(h, L.q, L.qBias, heads * D);
      let k = linear(h, L.k, L.kBias, kvHeads * D);
      const v = linear(h, L.v, L.vBias, kvHeads * D);
      if (L.qNorm) {
        q = rmsNorm(q, L.qNorm, eps, D);
        k = rmsNorm(k, L.kNorm, eps, D);
      }
      applyRope(q, D, cos, sin);
      applyRope(k, D, cos, sin);
      const c = cache.layers[l];
      c.k.push(k);
      c.v.push(v);
      const attn = this.attend(q, c, pos, L.window);
      const o = linear(attn, L.o, L.oBias, H);
      for (let i = 0; i < H; ++i) x[i] += o[i];
      const h2 = rmsNorm(x, L.postNorm, eps);
      const g = linear(h2, L.gate, null, I), u = linear(h2, L.up, null, I);
      for (let i = 0; i < I; ++i) g[i] = silu(g[i]) * u[i];
      const m = linear(g, L.down, null, H);
      for (let i = 0; i < H; ++i) x[i] += m[i];
    });
    cache.length = pos + 1;
    x = rmsNorm(x, this.model.norm, eps);
    return linear(x, this.model.lmHead, null, spec.vocab);
  }

  // Causal GQA attention of the query at `pos` over the cached keys it may see.
  attend(q, c, pos, window) {
    const { headDim: D, heads, kvHeads } = this.model.spec;
    const group = heads / kvHeads;
    const scale = 1 / Math.sqrt(D);
    const first = window == null ? 0 : Math.max(0, pos - window + 1); // j > pos - window
    const out = new Float64Array(heads * D);
    for (let h = 0; h < heads; ++h) {
      const kvh = Math.floor(h / group);
      const scores = new Float64Array(pos + 1 - first);
      let max = -Infinity;
      for (let j = first; j <= pos; ++j) {
        const kj = c.k[j];
        let s = 0;
        for (let d = 0; d < D; ++d) s += q[h * D + d] * kj[kvh * D + d];
        scores[j - first] = s * scale;
        max = Math.max(max, scores[j - first]);
      }
      let sum = 0;
      for (let j = 0; j < scores.length; ++j) {
        scores[j] = Math.exp(scores[j] - max);
        sum += scores[j];
      }
      for (let j = first; j <= pos; ++j) {
        const p = scores[j - first] / sum, vj = c.v[j];
        for (let d = 0; d < D; ++d) out[h * D + d] += p * vj[kvh * D + d];
      }
    }
    return out;
  }

  prefill(tokens, cache) { return tokens.map((t) => this.step(t, cache)); }
}

// ---------------------------------------------------------------------------------------------
// The three golden scenarios (tests/data/models/README.md).

const SCENARIO = { aPrompt: 37, aDecode: 12, bPrompt: 23, bDecode: 6, cPrompt: 300, cDecode: 8 };
const MAX_SEQ = Math.max(SCENARIO.aPrompt + SCENARIO.aDecode + SCENARIO.bPrompt + SCENARIO.bDecode,
                         SCENARIO.cPrompt + SCENARIO.cDecode);

function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; ++i) if (row[i] > row[best]) best = i;
  return best;
}

function margin(row) { // largest minus second largest
  let a = -Infinity, b = -Infinity;
  for (const v of row) {
    if (v > a) { b = a; a = v; } else if (v > b) b = v;
  }
  return a - b;
}

// Greedy decode of n steps after `last` logits; forced: the tokens to feed instead (teacher
// forcing, as a check against existing goldens does). Returns {tokens, logits, greedy}.
function decode(fwd, cache, last, n, forced) {
  const tokens = [], logits = [], greedy = [];
  let row = last;
  for (let k = 0; k < n; ++k) {
    greedy.push(argmax(row));
    const t = forced ? forced[k] : greedy[k];
    tokens.push(t);
    row = fwd.step(t, cache);
    logits.push(row);
  }
  return { tokens, logits, greedy };
}

function defaultPrompts(vocab) {
  const rng = new Rng(seedOf('forward64 prompts'));
  const draw = (n) => Array.from({ length: n }, () => rng.int(vocab));
  return { a: draw(SCENARIO.aPrompt), b: draw(SCENARIO.bPrompt), c: draw(SCENARIO.cPrompt) };
}

// Runs a, b (on a's cache) and c; forced: {a, b, c} decode tokens to feed, or null (greedy).
function runScenarios(model, prompts, forced, forwardOptions) {
  const fwd = new Forward(model, MAX_SEQ, forwardOptions);
  const cacheA = fwd.newCache();
  const aPre = fwd.prefill(prompts.a, cacheA);
  const aDec = decode(fwd, cacheA, aPre.at(-1), SCENARIO.aDecode, forced?.a);
  const bPre = fwd.prefill(prompts.b, cacheA);
  const bDec = decode(fwd, cacheA, bPre.at(-1), SCENARIO.bDecode, forced?.b);
  const cacheC = fwd.newCache();
  const cPre = fwd.prefill(prompts.c, cacheC);
  const cDec = decode(fwd, cacheC, cPre.at(-1), SCENARIO.cDecode, forced?.c);
  return {
    'a.prompt': prompts.a, 'a.prefill_logits': aPre,
    'a.decode_tokens': aDec.tokens, 'a.decode_logits': aDec.logits,
    'b.prompt': prompts.b, 'b.prefill_logits': bPre,
    'b.decode_tokens': bDec.tokens, 'b.decode_logits': bDec.logits,
    'c.prompt': prompts.c, 'c.last_logits': [cPre.at(-1)],
    'c.decode_tokens': cDec.tokens, 'c.decode_logits': cDec.logits,
    greedy: { a: aDec.greedy, b: bDec.greedy, c: cDec.greedy },
  };
}

const LOGIT_NAMES = ['a.decode_logits', 'a.prefill_logits', 'b.decode_logits',
                     'b.prefill_logits', 'c.decode_logits', 'c.last_logits'];
const ID_NAMES = ['a.decode_tokens', 'a.prompt', 'b.decode_tokens', 'b.prompt',
                  'c.decode_tokens', 'c.prompt'];

function flatten(rows) {
  const out = new Float64Array(rows.length * rows[0].length);
  rows.forEach((r, i) => out.set(r, i * r.length));
  return out;
}

function writeGoldens(dir, model, result, note) {
  const V = model.spec.vocab;
  const tensors = [
    ...LOGIT_NAMES.map((name) => ({
      name, dtype: 'F32', shape: [result[name].length, V], data: flatten(result[name]) })),
    ...ID_NAMES.map((name) => ({
      name, dtype: 'I32', shape: [result[name].length], data: Int32Array.from(result[name]) })),
  ];
  writeSafetensors(path.join(dir, 'goldens.safetensors'), tensors);
  const describe = {};
  for (const name of [...ID_NAMES.slice().sort(), ...LOGIT_NAMES]) {
    const t = tensors.find((x) => x.name === name);
    describe[name] = [t.shape, t.dtype === 'F32' ? 'torch.float32' : 'torch.int32'];
  }
  const ordered = {};
  for (const s of ['a', 'b', 'c'])
    for (const k of ['prompt', 'prefill_logits', 'last_logits', 'decode_tokens', 'decode_logits'])
      if (describe[`${s}.${k}`]) ordered[`${s}.${k}`] = describe[`${s}.${k}`];
  const minMargin = (name) => Math.min(...result[name].map(margin));
  const json = {
    note,
    scenarios: {
      a: 'fresh conversation: prefill a.prompt (positions 0..36); a.prefill_logits[i] are the ' +
         'logits at position i; then decode: feed a.decode_tokens[k] at position 37+k, ' +
         'a.decode_logits[k] are the logits of that step. a.decode_tokens[0] is the argmax of ' +
         'a.prefill_logits[-1] (greedy).',
      b: 'second turn: with the KV cache of a.prompt + a.decode_tokens (49 positions) kept, ' +
         'prefill b.prompt at positions 49..71, then decode b.decode_tokens[k] at position 72+k.',
      c: 'fresh conversation with a 300-token prompt: c.last_logits are the logits at position ' +
         '299; then decode c.decode_tokens[k] at 300+k.',
      'a.decode_logits.min_margin': minMargin('a.decode_logits'),
      'b.decode_logits.min_margin': minMargin('b.decode_logits'),
      'c.decode_logits.min_margin': minMargin('c.decode_logits'),
    },
    tensors: ordered,
  };
  fs.writeFileSync(path.join(dir, 'goldens.json'), JSON.stringify(json, null, 2) + '\n');
}

function oracleNote(model, extra = '') {
  const { spec } = model;
  const windows = spec.windows.some((w) => w != null)
    ? `, sliding windows per layer [${spec.windows.map((w) => w ?? 'full').join(', ')}]` : '';
  return `${spec.family} (rope_type ${spec.rope.rope_type}${windows}); oracle: ` +
         `tests/oracles/forward64.mjs, an independent float64 forward written from transformers' ` +
         `modeling code (not transformers, not tpullm)${extra}`;
}

function computeGoldens(dir, { configOverride, note } = {}) {
  const model = loadModel(dir, configOverride);
  const result = runScenarios(model, defaultPrompts(model.spec.vocab), null);
  writeGoldens(dir, model, result, note ?? oracleNote(model));
  return result;
}

// Recomputes DIR's goldens from its prompts and decode tokens and prints, per logits tensor,
// max|ours - golden| / max|golden|. Returns the worst ratio.
function checkGoldens(dir, tol, forwardOptions) {
  const model = loadModel(dir);
  const golden = readSafetensors(path.join(dir, 'goldens.safetensors'));
  const ids = (name) => Array.from(golden.get(name).data);
  const prompts = { a: ids('a.prompt'), b: ids('b.prompt'), c: ids('c.prompt') };
  const forced = {
    a: ids('a.decode_tokens'), b: ids('b.decode_tokens'), c: ids('c.decode_tokens'),
  };
  const t0 = process.hrtime.bigint();
  const ours = runScenarios(model, prompts, forced, forwardOptions);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const { family, rope, layers, vocab } = model.spec;
  console.log(`${dir}: ${family}, rope_type ${rope.rope_type}, ${layers} layers, vocab ${vocab}` +
              ` (forward ${seconds.toFixed(2)} s)`);
  console.log('tensor              max|ours-golden|  max|golden|  ratio');
  let worst = 0;
  for (const name of LOGIT_NAMES) {
    const g = golden.get(name).data;
    const o = flatten(ours[name]);
    if (o.length !== g.length) throw new Error(`${name}: ${o.length} values, golden ${g.length}`);
    let err = 0, scale = 0;
    for (let i = 0; i < g.length; ++i) {
      err = Math.max(err, Math.abs(o[i] - g[i]));
      scale = Math.max(scale, Math.abs(g[i]));
    }
    const ratio = err / scale;
    worst = Math.max(worst, ratio);
    console.log(`${name.padEnd(18)}  ${err.toExponential(3).padStart(16)}  ` +
                `${scale.toExponential(3).padStart(11)}  ${ratio.toExponential(3)}`);
  }
  for (const s of ['a', 'b', 'c']) { // greedy agreement: informative, near-ties may differ
    const diff = ours.greedy[s].filter((t, k) => t !== forced[s][k]).length;
    if (diff)
      console.log(`${s}: ${diff} of ${forced[s].length} golden decode tokens are not our argmax`);
  }
  const verdict = worst <= tol ? 'within' : 'EXCEEDS';
  console.log(`worst ratio ${worst.toExponential(3)}: ${verdict} ${tol}`);
  return worst;
}

// ---------------------------------------------------------------------------------------------
// Random checkpoints: the cases whose goldens no transformers-made checkpoint provides.

const BASE = {
  attention_dropout: 0.0, bos_token_id: 1, eos_token_id: 2, hidden_act: 'silu',
  initializer_range: 0.02, torch_dtype: 'float32', use_cache: true,
};

function qwenBase(modelType, arch) {
  return {
    ...BASE, architectures: [arch], model_type: modelType, hidden_size: 64,
    intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
    vocab_size: 384, max_position_embeddings: 512, rms_norm_eps: 1e-6, max_window_layers: 28,
    use_sliding_window: false, sliding_window: null, tie_word_embeddings: true,
  };
}

function llamaBase() {
  return {
    ...BASE, architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: 64,
    intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
    head_dim: 16, vocab_size: 256, max_position_embeddings: 512, rms_norm_eps: 1e-5,
    attention_bias: false, mlp_bias: false, pretraining_tp: 1, rope_theta: 10000.0,
    tie_word_embeddings: false,
  };
}

const CASES = {
  // YaRN past original_max_position_embeddings (scenario c reaches 307 > 64), defaults for
  // beta_fast / beta_slow / truncate and the default attention factor 0.1 ln(4) + 1.
  'yarn-qwen2': {
    what: 'qwen2, q/k/v bias, tied, yarn factor 4 over original 64 (transformers-4 rope_scaling)',
    config: {
      ...qwenBase('qwen2', 'Qwen2ForCausalLM'), rope_theta: 10000.0,
      rope_scaling: { rope_type: 'yarn', factor: 4.0, original_max_position_embeddings: 64 },
      layer_types: ['full_attention', 'full_attention'],
    },
  },
  // The other yarn branches: transformers-5 rope_parameters, mscale / mscale_all_dim for the
  // attention factor, truncate false (a fractional correction range), explicit betas, and
  // head_dim 32 != hidden / heads.
  'yarn-qwen3': {
    what: 'qwen3, q/k norm, head_dim 32, yarn factor 4 over original 256 with mscale 0.9 / ' +
          'mscale_all_dim 0.6 and truncate false (transformers-5 rope_parameters)',
    config: (() => {
      const c = {
        ...qwenBase('qwen3', 'Qwen3ForCausalLM'), head_dim: 32, attention_bias: false,
        vocab_size: 320, max_position_embeddings: 1024, tie_word_embeddings: false,
        dtype: 'float32',
        rope_parameters: {
          rope_type: 'yarn', rope_theta: 10000.0, factor: 4.0,
          original_max_position_embeddings: 256, beta_fast: 32.0, beta_slow: 1.0,
          mscale: 0.9, mscale_all_dim: 0.6, truncate: false,
        },
        layer_types: ['full_attention', 'full_attention'],
      };
      delete c.torch_dtype;
      return c;
    })(),
  },
  'linear-llama': {
    what: 'llama, linear RoPE scaling factor 4 (old "type" key)',
    config: { ...llamaBase(), rope_scaling: { type: 'linear', factor: 4.0 } },
  },
  // Wavelengths 6.3 (kept), 19.9 and 62.8 (smoothed), 199 and up (divided by 8) at head_dim 16.
  'llama3-llama': {
    what: 'llama, llama3 RoPE factor 8, low 1, high 4, original 64',
    config: {
      ...llamaBase(),
      rope_scaling: { rope_type: 'llama3', factor: 8.0, low_freq_factor: 1.0,
                      high_freq_factor: 4.0, original_max_position_embeddings: 64 },
    },
  },
  'dynamic-llama': {
    what: 'llama, dynamic NTK RoPE factor 2 (the default frequencies up to 512)',
    config: { ...llamaBase(), rope_scaling: { type: 'dynamic', factor: 2.0 } },
  },
  'sw-mistral': {
    what: 'mistral, sliding_window 24 on every layer',
    config: {
      ...BASE, architectures: ['MistralForCausalLM'], model_type: 'mistral', hidden_size: 64,
      intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4,
      num_key_value_heads: 2, head_dim: 16, vocab_size: 256, max_position_embeddings: 512,
      rms_norm_eps: 1e-5, rope_theta: 1000000.0, sliding_window: 24, tie_word_embeddings: false,
    },
  },
  // No layer_types: the windowed layers come from max_window_layers (layer 0 full, 1-2 windowed).
  'sw-qwen2': {
    what: 'qwen2, use_sliding_window, sliding_window 20, max_window_layers 1 of 3 layers',
    config: {
      ...qwenBase('qwen2', 'Qwen2ForCausalLM'), num_hidden_layers: 3, rope_theta: 1000000.0,
      rope_scaling: null, use_sliding_window: true, sliding_window: 20, max_window_layers: 1,
    },
  },
  // A negative control: yarn-qwen2's checkpoint, its goldens computed with plain RoPE.
  'yarn-qwen2-wrong-goldens': {
    what: "yarn-qwen2's checkpoint with goldens from default RoPE (verify must fail)",
    weightsOf: 'yarn-qwen2',
    goldensConfig: (c) => ({ ...c, rope_scaling: null }),
  },
};

function caseConfig(name) {
  const c = CASES[name];
  return structuredClone(c.config ?? CASES[c.weightsOf].config);
}

function randomWeights(cfg, rng) {
  const spec = resolveConfig(cfg);
  const { hidden: H, intermediate: I, heads, kvHeads, headDim: D, vocab: V } = spec;
  const tensors = [];
  const add = (name, shape, gen) => {
    const n = shape.reduce((a, b) => a * b, 1);
    tensors.push({ name, dtype: 'F32', shape, data: Float64Array.from({ length: n }, gen) });
  };
  const normal = (std) => () => Math.fround(std * rng.normal());
  const around1 = () => Math.fround(1 + 0.1 * rng.normal());
  const bias = () => Math.fround(0.1 * rng.normal());
  const qkvBias = spec.family === 'qwen2' || (cfg.attention_bias && spec.family !== 'mistral');
  add('model.embed_tokens.weight', [V, H], normal(0.15));
  for (let l = 0; l < spec.layers; ++l) {
    const p = `model.layers.${l}.`;
    add(p + 'input_layernorm.weight', [H], around1);
    add(p + 'self_attn.q_proj.weight', [heads * D, H], normal(0.15));
    add(p + 'self_attn.k_proj.weight', [kvHeads * D, H], normal(0.15));
    add(p + 'self_attn.v_proj.weight', [kvHeads * D, H], normal(0.15));
    if (qkvBias) {
      add(p + 'self_attn.q_proj.bias', [heads * D], bias);
      add(p + 'self_attn.k_proj.bias', [kvHeads * D], bias);
      add(p + 'self_attn.v_proj.bias', [kvHeads * D], bias);
    }
    add(p + 'self_attn.o_proj.weight', [H, heads * D], normal(0.15));
    if (spec.family === 'qwen3') {
      add(p + 'self_attn.q_norm.weight', [D], around1);
      add(p + 'self_attn.k_norm.weight', [D], around1);
    }
    add(p + 'post_attention_layernorm.weight', [H], around1);
    add(p + 'mlp.gate_proj.weight', [I, H], normal(0.15));
    add(p + 'mlp.up_proj.weight', [I, H], normal(0.15));
    add(p + 'mlp.down_proj.weight', [H, I], normal(0.15));
  }
  add('model.norm.weight', [H], around1);
  if (!spec.tied) add('lm_head.weight', [V, H], normal(0.15));
  return tensors.sort((a, b) => (a.name < b.name ? -1 : 1));
}

// Keys sorted at every level, as transformers' to_json_string writes a config.
function sortedKeys(value) {
  if (Array.isArray(value)) return value.map(sortedKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sortedKeys(value[k])]));
}

function makeCase(outDir, name) {
  const c = CASES[name];
  if (!c) throw new UsageError(`unknown case '${name}' (${Object.keys(CASES).join(', ')})`);
  const cfg = caseConfig(name);
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, 'config.json'),
                   JSON.stringify(sortedKeys(cfg), null, 2) + '\n');
  fs.writeFileSync(path.join(outDir, 'generation_config.json'), JSON.stringify({
    _from_model_config: true, bos_token_id: cfg.bos_token_id, eos_token_id: cfg.eos_token_id,
    output_attentions: false, output_hidden_states: false, use_cache: true,
  }, null, 2) + '\n');
  const rng = new Rng(seedOf(c.weightsOf ?? name));
  writeSafetensors(path.join(outDir, 'model.safetensors'), randomWeights(cfg, rng),
                   { format: 'pt' });
  const extra = `; case ${name}: ${c.what}; random f32 weights, seed '${c.weightsOf ?? name}'`;
  if (c.goldensConfig) {
    const override = c.goldensConfig(cfg);
    const model = loadModel(outDir, override);
    computeGoldens(outDir, { configOverride: override,
                             note: oracleNote(model, extra) + ' -- DELIBERATELY WRONG: computed ' +
                                   'with rope_scaling removed from config.json' });
  } else {
    computeGoldens(outDir, { note: oracleNote(loadModel(outDir), extra) });
  }
  const bytes = fs.statSync(path.join(outDir, 'model.safetensors')).size;
  const kib = (bytes / 1024).toFixed(0);
  console.log(`wrote ${name} into ${outDir} (${kib} KiB of weights): ${c.what}`);
}

// ---------------------------------------------------------------------------------------------
// Command line.

class UsageError extends Error {}

const FLAGS = ['rope-f32', 'force'];

// `goldens` replaces DIR's goldens only when this oracle wrote them (or there are none), so
// that transformers' goldens in tests/data/models are never overwritten by mistake.
function refuseForeignGoldens(dir, force) {
  const file = path.join(dir, 'goldens.json');
  if (force || !fs.existsSync(file)) return;
  const note = JSON.parse(fs.readFileSync(file, 'utf8')).note ?? '';
  if (!note.includes('forward64.mjs'))
    throw new UsageError(`${file}: goldens from another oracle ("${note}"); --force replaces them`);
}

function parseArgs(argv) {
  const positional = [], options = {};
  for (let i = 0; i < argv.length; ++i) {
    if (FLAGS.includes(argv[i].slice(2))) {
      options[argv[i].slice(2)] = true;
    } else if (argv[i].startsWith('--')) {
      if (i + 1 >= argv.length) throw new UsageError(`${argv[i]} needs a value`);
      options[argv[i].slice(2)] = argv[++i];
    } else {
      positional.push(argv[i]);
    }
  }
  return { positional, options };
}

const USAGE = 'usage: forward64.mjs make OUT_DIR --case NAME | goldens DIR [--force] | ' +
              'check DIR [--tol T] [--rope-f32] | cases';

function main(argv) {
  const { positional: [command, dir, ...rest], options } = parseArgs(argv);
  if (rest.length) throw new UsageError(USAGE);
  switch (command) {
    case 'make':
      if (!dir || !options.case) throw new UsageError(USAGE);
      makeCase(dir, options.case);
      return 0;
    case 'goldens':
      if (!dir) throw new UsageError(USAGE);
      refuseForeignGoldens(dir, options.force === true);
      computeGoldens(dir);
      console.log(`wrote ${path.join(dir, 'goldens.safetensors')}`);
      return 0;
    case 'check': {
      if (!dir) throw new UsageError(USAGE);
      const tol = Number(options.tol ?? 1e-5);
      if (!(tol > 0)) throw new UsageError('--tol must be > 0');
      return checkGoldens(dir, tol, { ropeF32: options['rope-f32'] === true }) <= tol ? 0 : 1;
    }
    case 'cases':
      for (const [name, c] of Object.entries(CASES)) console.log(`${name.padEnd(26)} ${c.what}`);
      return 0;
    default:
      throw new UsageError(USAGE);
  }
}

try {
  process.exitCode = main(process.argv.slice(2));
} catch (e) {
  console.error(`forward64: ${e instanceof UsageError ? '' : 'error: '}${e.message}`);
  process.exitCode = 2;
}
