//! The launch lists of `build` and the driver, on the CPU device.

use super::*;
use crate::draft::DraftTree;
use crate::layout::build_plan;
use crate::params::{LogprobsMode, SamplingParams};
use crate::request::Request;
use sampler_kernels::spec::LaunchArg;

/// The logits every kernel reads: the caller's ([`Buf::Logits`], read
/// only, any element type) without a grammar mask; with one, the mask
/// check writes every row to [`Buf::Masked`] (`copy = 1`) and every
/// later kernel reads that, on each device's launch order.
#[test]
fn a_mask_switches_the_logits_source_to_the_masked_copy() {
    let v = 5000u32;
    let p = SamplingParams { top_k: 20, logprobs_mode: LogprobsMode::Raw, seq_seed: Some(4), ..Default::default() };
    let logits = vec![0.5f32; 2 * v as usize];
    let mut masked = Request::prefill(p.clone(), 5);
    masked.masks = Some(vec![vec![u32::MAX; v.div_ceil(32) as usize]]);
    let caps = [
        Caps {
            mask_chunk: None,
            topn_chunks: 1,
            fused_max: 0,
            counts_in_topn: false,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        },
        Caps {
            mask_chunk: Some(4096),
            topn_chunks: 2,
            fused_max: u32::MAX,
            counts_in_topn: false,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        },
    ];
    for (with_mask, reqs) in [
        (false, vec![Request::prefill(p.clone(), 5), Request::prefill(p.clone(), 9)]),
        (true, vec![Request::prefill(p.clone(), 5), masked]),
    ] {
        let (plan, _) = build_plan(v, v, 5, &logits, &reqs).unwrap();
        for c in &caps {
            for prefix in [None, plan.prefix_width()] {
                let prog = build(&plan, prefix, c).unwrap();
                let want = if with_mask { Buf::Masked } else { Buf::Logits };
                let masked_len = prog.bufs.iter().find(|b| b.buf == Buf::Masked).map(|b| b.len);
                assert_eq!(masked_len, Some(if with_mask { 2 * v as usize } else { 0 }));
                let mut readers = 0;
                for l in &prog.launches {
                    for (a, ps) in l.args.iter().zip(l.spec.params) {
                        if ps.kind == sampler_kernels::spec::ParamKind::Logits {
                            let first = l.spec.name.starts_with("mask_check");
                            assert_eq!(
                                *a,
                                LaunchArg::Buf(if first { Buf::Logits } else { want }),
                                "{}.{}",
                                l.spec.name,
                                ps.name
                            );
                            readers += 1;
                        }
                        if ps.name == "copy" {
                            assert_eq!(*a, LaunchArg::U32(with_mask as u32), "{}", l.spec.name);
                        }
                        // Nothing writes the caller's logits.
                        if matches!(ps.kind, sampler_kernels::spec::ParamKind::GmMut(_)) {
                            assert_ne!(*a, LaunchArg::Buf(Buf::Logits), "{}.{}", l.spec.name, ps.name);
                        }
                    }
                }
                // The mask check, the top-N, raw logprobs (and row_mass on the prefix path).
                assert!(readers >= 3, "{:?}", prog.kernel_names());
            }
        }
    }
}

/// The entry from merged candidates runs the same steps 3-9 as the full
/// program: given the full program's own candidates and row statuses,
/// it reproduces its outputs bit for bit (a verify, a prefill and a
/// prompt-logprobs request, top logprobs and processed rows included).
#[test]
fn from_candidates_equals_the_full_program() {
    use crate::request::{DraftDist, RequestKind};
    use crate::runtime::device::cpu::CpuDevice;
    let v = 3000u32;
    let p0 = SamplingParams {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.9,
        top_logprobs: 3,
        seq_seed: Some(9),
        ..Default::default()
    };
    let dist = DraftDist { ids: vec![5, 17, 42], logprobs: vec![-0.4, -1.6, -2.5] };
    let reqs = vec![
        Request::decode(p0.clone(), 50, 3, vec![17, 42], vec![dist.clone(), dist]),
        Request::prefill(SamplingParams { top_k: -1, ..p0.clone() }, 12),
        Request { params: p0, kind: RequestKind::PromptLogprobs { targets: vec![3, -1] }, golden: vec![], masks: None },
    ];
    let rows: usize = reqs.iter().map(|r| r.rows()).sum();
    let logits: Vec<f32> = (0..rows * v as usize).map(|i| ((i * 7919) % 1013) as f32 * 0.01 - 5.0).collect();
    let (mut p, infos) = build_plan(v, 256, 5, &logits, &reqs).unwrap();
    assert!(infos.iter().all(|i| i.params.is_ok()), "{infos:?}");
    p.processed_rows = vec![1, 4];
    let mut dev = CpuDevice::default();
    let (want, _) = run_program(&mut dev, &p, None).unwrap();
    let rn = rows * 256;
    let (mut cand, mut ids, mut status) = (vec![0f32; rn], vec![0i32; rn], vec![0i32; rows]);
    dev.download(Buf::Cand, 0, HostSliceMut::F32(&mut cand)).unwrap();
    dev.download(Buf::CandIds, 0, HostSliceMut::I32(&mut ids)).unwrap();
    dev.download(Buf::RowStatus, 0, HostSliceMut::I32(&mut status)).unwrap();
    dev.finish().unwrap();
    let (got, overflow) = run_from_candidates(&mut CpuDevice::default(), &p, &status, &cand, &ids, 256, None).unwrap();
    assert_eq!(format!("{got:?}"), format!("{want:?}"));
    assert_eq!(overflow, vec![0; rows]);
    assert!(want.tokens.iter().any(|&t| t >= 0) && !want.processed_ids.is_empty());
    // Wrong-length candidates are a typed error.
    assert!(run_from_candidates(&mut CpuDevice::default(), &p, &status, &cand[1..], &ids, 256, None).is_err());
}

/// `Caps::counts_in_topn`: on a step without a grammar mask or a raw
/// row, no mask check runs and the top-N counts (`force_topn_counted`
/// writes the status; `topn_chunk_counted` the chunk counts topn_merge
/// merges, `mchunks = chunks`); with a mask or a raw row, or with the
/// flag off, the launch list is the mask check's, unchanged.
#[test]
fn counts_in_topn_replaces_the_mask_check_only_without_masks_or_raw_rows() {
    let v = 5000u32;
    let plain = SamplingParams { top_k: 20, seq_seed: Some(4), ..Default::default() };
    let raw =
        SamplingParams { logprobs_mode: LogprobsMode::Raw, top_logprobs: 2, seq_seed: Some(3), ..Default::default() };
    let mut masked = Request::prefill(plain.clone(), 5);
    masked.masks = Some(vec![vec![u32::MAX; v.div_ceil(32) as usize]]);
    let mut caps = Vec::new();
    for counts_in_topn in [false, true] {
        caps.push(Caps {
            mask_chunk: None,
            topn_chunks: 1,
            fused_max: 0,
            counts_in_topn,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        });
        caps.push(Caps {
            mask_chunk: Some(8192),
            topn_chunks: 1,
            fused_max: 0,
            counts_in_topn,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        });
        caps.push(Caps {
            mask_chunk: Some(4096),
            topn_chunks: 2,
            fused_max: u32::MAX,
            counts_in_topn,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        });
        caps.push(Caps {
            mask_chunk: None,
            topn_chunks: 3,
            fused_max: u32::MAX,
            counts_in_topn,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        });
    }
    for (reqs, mask, any_raw) in [
        (vec![Request::prefill(plain.clone(), 5), Request::prefill(plain.clone(), 9)], false, false),
        (vec![Request::prefill(plain.clone(), 5), masked.clone()], true, false),
        (vec![Request::prefill(plain.clone(), 5), Request::prefill(raw.clone(), 9)], false, true),
        (vec![masked.clone(), Request::prefill(raw.clone(), 9)], true, true),
    ] {
        let rows: usize = reqs.iter().map(|r| r.rows()).sum();
        let logits: Vec<f32> = (0..rows * v as usize).map(|i| (i % 97) as f32 * 0.01).collect();
        let (p, _) = build_plan(v, 1024, 5, &logits, &reqs).unwrap();
        assert_eq!((any_mask(&p), p.any_raw), (mask, any_raw));
        for c in &caps {
            for prefix in [None, p.prefix_width()] {
                let prog = build(&p, prefix, c).unwrap();
                let names = prog.kernel_names();
                let at = |k: &str| names.iter().position(|n| *n == k);
                let counted = c.counts_in_topn && !mask && !any_raw;
                let chunked = c.topn_chunks > 1;
                let what = format!("{c:?} mask {mask} raw {any_raw} prefix {prefix:?}: {names:?}");
                assert_eq!(at("mask_check").is_some(), !counted && c.mask_chunk.is_none(), "{what}");
                assert_eq!(at("mask_check_chunk").is_some(), !counted && c.mask_chunk.is_some(), "{what}");
                assert_eq!(at("status_merge").is_some(), !counted && c.mask_chunk.is_some() && !chunked, "{what}");
                assert_eq!(at("force_topn").is_some(), !counted && !chunked, "{what}");
                assert_eq!(at("force_topn_counted").is_some(), counted && !chunked, "{what}");
                assert_eq!(at("topn_chunk").is_some(), !counted && chunked, "{what}");
                assert_eq!(at("topn_chunk_counted").is_some(), counted && chunked, "{what}");
                assert_eq!(at("topn_merge").is_some(), chunked, "{what}");
                let arg = |k: &str, name: &str| {
                    let l = &prog.launches[at(k).unwrap()];
                    l.args.iter().zip(l.spec.params).find(|(_, q)| q.name == name).map(|(a, _)| *a).unwrap()
                };
                if counted && chunked {
                    // One count per top-N chunk, merged into the status by topn_merge.
                    assert_eq!(arg("topn_merge", "mchunks"), LaunchArg::U32(c.topn_chunks), "{what}");
                    assert_eq!(arg("topn_chunk_counted", "bad"), LaunchArg::Buf(Buf::ChunkBad), "{what}");
                    let len = prog.bufs.iter().find(|b| b.buf == Buf::ChunkBad).map(|b| b.len);
                    assert_eq!(len, Some(rows * c.topn_chunks as usize), "{what}");
                }
                if counted && !chunked {
                    assert_eq!(arg("force_topn_counted", "status"), LaunchArg::Buf(Buf::RowStatus), "{what}");
                }
                // The same step without the flag: one launch more (mask check), two
                // with status_merge (a mask chunk and no chunked top-N).
                let off = build(&p, prefix, &Caps { counts_in_topn: false, ..*c }).unwrap();
                let extra = if counted { 1 + (c.mask_chunk.is_some() && !chunked) as usize } else { 0 };
                assert_eq!(off.launches.len(), prog.launches.len() + extra, "{what}");
            }
        }
    }
}

/// `Caps::stream_select`: `force_topn_stream` (status and fallback codes
/// written, survivor room asked for as staging) replaces the mask check
/// and every other top-N kernel on steps without a grammar mask or a raw
/// row and N <= STREAM_MAX_N; otherwise the launch list is unchanged.
#[test]
fn stream_select_replaces_the_top_n_only_without_masks_raw_rows_or_wide_n() {
    let v = 9000u32;
    let plain = SamplingParams { top_k: 20, seq_seed: Some(4), ..Default::default() };
    let raw =
        SamplingParams { logprobs_mode: LogprobsMode::Raw, top_logprobs: 2, seq_seed: Some(3), ..Default::default() };
    let mut masked = Request::prefill(plain.clone(), 5);
    masked.masks = Some(vec![vec![u32::MAX; v.div_ceil(32) as usize]]);
    for (reqs, plain_step) in [
        (vec![Request::prefill(plain.clone(), 5), Request::prefill(plain.clone(), 9)], true),
        (vec![Request::prefill(plain.clone(), 5), masked.clone()], false),
        (vec![Request::prefill(plain.clone(), 5), Request::prefill(raw.clone(), 9)], false),
    ] {
        let rows: usize = reqs.iter().map(|r| r.rows()).sum();
        let logits: Vec<f32> = (0..rows * v as usize).map(|i| (i % 97) as f32 * 0.01).collect();
        for width in [64u32, 1024, 4096, 8192] {
            let (p, _) = build_plan(v, width, 5, &logits, &reqs).unwrap();
            for c in [
                Caps {
                    mask_chunk: Some(4096),
                    topn_chunks: 2,
                    fused_max: u32::MAX,
                    counts_in_topn: false,
                    stream_select: true,
                    stream_chunks: 0,
                    prefix_order: true,
                    kept_head: true,
                    fold_finalize: true,
                    fold_tail: true,
                    head_tile: 1024,
                    cluster: 0,
                    cluster_tail: false,
                    pdl: false,
                    pdl_max_ctas: 0,
                },
                Caps {
                    mask_chunk: None,
                    topn_chunks: 1,
                    fused_max: 0,
                    counts_in_topn: true,
                    stream_select: true,
                    stream_chunks: 0,
                    prefix_order: true,
                    kept_head: true,
                    fold_finalize: true,
                    fold_tail: true,
                    head_tile: 1024,
                    cluster: 0,
                    cluster_tail: false,
                    pdl: false,
                    pdl_max_ctas: 0,
                },
            ] {
                for prefix in [None, p.prefix_width()] {
                    let prog = build(&p, prefix, &c).unwrap();
                    let n = prog.width;
                    let names = prog.kernel_names();
                    let what = format!("{c:?} width {width} prefix {prefix:?}: {names:?}");
                    let streamed = plain_step && n <= STREAM_MAX_N;
                    assert_eq!(!any_mask(&p) && !p.any_raw, plain_step, "{what}");
                    assert_eq!(names.contains(&"force_topn_stream"), streamed, "{what}");
                    if streamed {
                        for k in [
                            "mask_check",
                            "mask_check_chunk",
                            "status_merge",
                            "force_topn",
                            "force_topn_counted",
                            "topn_chunk",
                            "topn_chunk_counted",
                            "topn_merge",
                        ] {
                            assert!(!names.contains(&k), "{what}");
                        }
                        let l = prog.launches.iter().find(|l| l.spec.name == "force_topn_stream").unwrap();
                        assert_eq!(l.stage, 2 * stream_buffer_keys(n), "{what}");
                        assert_eq!(l.grid, rows as u32, "{what}");
                        let len = prog.bufs.iter().find(|b| b.buf == Buf::SelFallback).map(|b| b.len);
                        assert_eq!(len, Some(rows), "{what}");
                    } else {
                        let off = build(&p, prefix, &Caps { stream_select: false, ..c }).unwrap();
                        assert_eq!(off.kernel_names(), names, "{what}");
                    }
                }
            }
        }
    }
}

/// Caps with the streaming top-N on over `stream_chunks` blocks a row, prefix order on.
fn stream_caps(stream_chunks: u32) -> Caps {
    Caps {
        mask_chunk: None,
        topn_chunks: 4,
        fused_max: 0,
        counts_in_topn: true,
        stream_select: true,
        stream_chunks,
        prefix_order: true,
        kept_head: true,
        fold_finalize: true,
        fold_tail: true,
        head_tile: 1024,
        cluster: 0,
        cluster_tail: false,
        pdl: false,
        pdl_max_ctas: 0,
    }
}

/// Two prefill requests with top-k 20 (prompts of 5 and 9 tokens) and their
/// `[2, v]` logits, for the launch-shape tests below.
fn two_top_k_rows(v: u32) -> (Vec<Request>, Vec<f32>) {
    let plain = SamplingParams { top_k: 20, seq_seed: Some(4), ..Default::default() };
    let reqs = vec![Request::prefill(plain.clone(), 5), Request::prefill(plain, 9)];
    let logits: Vec<f32> = (0..2 * v as usize).map(|i| (i % 97) as f32 * 0.01).collect();
    (reqs, logits)
}

/// With `stream_chunks` above 1 the streaming top-N is two launches,
/// `topn_chunk_stream` over `rows * chunks` programs then `topn_merge_stream`
/// over `rows`, in place of `force_topn_stream`; 0 and 1 leave one block a row.
#[test]
fn stream_chunks_split_the_streaming_top_n() {
    let v = 9000u32;
    let (reqs, logits) = two_top_k_rows(v);
    let (p, _) = build_plan(v, 1024, 5, &logits, &reqs).unwrap();
    for sc in [0u32, 1, 2, 8] {
        let prog = build(&p, None, &stream_caps(sc)).unwrap();
        let names = prog.kernel_names();
        let grid = |k: &str| prog.launches.iter().find(|l| l.spec.name == k).map(|l| l.grid);
        if sc > 1 {
            assert_eq!(grid("topn_chunk_stream"), Some(2 * sc), "{names:?}");
            assert_eq!(grid("topn_merge_stream"), Some(2), "{names:?}");
            assert!(!names.contains(&"force_topn_stream") && !names.contains(&"topn_merge"), "{names:?}");
        } else {
            assert_eq!(grid("force_topn_stream"), Some(2), "{names:?}");
            assert!(!names.contains(&"topn_chunk_stream"), "{names:?}");
        }
    }
}

/// [`Caps::pdl`] marks every launch of a step, on the full-row path, the
/// prefix path and from candidates (NVIDIA launches each with programmatic
/// dependent launch), when the step's widest launch outside a cluster has at
/// most [`Caps::pdl_max_ctas`] programs; no launch otherwise.
#[test]
fn pdl_caps_mark_every_launch_of_a_narrow_enough_step() {
    let v = 9000u32;
    let (reqs, logits) = two_top_k_rows(v);
    let widest = |prog: &Program| prog.launches.iter().filter(|l| l.cluster <= 1).map(|l| l.grid).max().unwrap();
    for width in [64u32, 1024, 4096] {
        let (p, _) = build_plan(v, width, 5, &logits, &reqs).unwrap();
        for (sc, cl) in [(0u32, 0u32), (4, 0), (0, 8)] {
            let base = Caps { cluster: cl, ..stream_caps(sc) };
            let progs = |caps: &Caps| {
                [
                    build(&p, None, caps),
                    build(&p, Some(width.min(256)), caps),
                    build_from_candidates(&p, width, true, caps),
                ]
                .map(|r| r.unwrap())
            };
            for prog in progs(&Caps { pdl: false, pdl_max_ctas: u32::MAX, ..base }) {
                assert!(prog.launches.iter().all(|l| !l.pdl), "{:?}", prog.kernel_names());
            }
            for (i, prog) in progs(&Caps { pdl: true, pdl_max_ctas: u32::MAX, ..base }).iter().enumerate() {
                assert!(!prog.launches.is_empty());
                assert!(prog.launches.iter().all(|l| l.pdl), "{:?}", prog.kernel_names());
                // At the widest launch's width still on, one below it off.
                let w = widest(prog);
                let at = |m: u32| progs(&Caps { pdl: true, pdl_max_ctas: m, ..base })[i].clone();
                assert!(at(w).launches.iter().all(|l| l.pdl), "{:?} at {w}", prog.kernel_names());
                assert!(at(w - 1).launches.iter().all(|l| !l.pdl), "{:?} at {w} - 1", prog.kernel_names());
            }
        }
    }
}

/// With `cluster` above 1 the streaming top-N is one `topn_cluster` launch
/// of `rows` programs of that many CTAs each (each CTA's slice of the row as
/// its staging), in place of `force_topn_stream` and of the chunked stream;
/// steps it does not take (a grammar mask, N above `STREAM_MAX_N`) keep
/// their launches, and every other launch is a single CTA a program. With
/// `cluster_tail`, where the tail is `process_draw_finish`, the step is the
/// one `topn_cluster_draw_finish` launch.
#[test]
fn cluster_caps_select_each_row_over_a_cluster() {
    let v = 9000u32;
    let (reqs, logits) = two_top_k_rows(v);
    for width in [1024u32, 4096, 8192] {
        let (p, _) = build_plan(v, width, 5, &logits, &reqs).unwrap();
        for (sc, cl) in [(0u32, 8u32), (8, 16), (4, 2), (0, 6), (0, 7)] {
            let prog = build(&p, None, &Caps { cluster: cl, ..stream_caps(sc) }).unwrap();
            let names = prog.kernel_names();
            let l = prog.launches.iter().find(|l| l.spec.name == "topn_cluster");
            if width > STREAM_MAX_N {
                assert!(l.is_none(), "{names:?}");
                continue;
            }
            let l = l.unwrap_or_else(|| panic!("no topn_cluster: {names:?}"));
            assert_eq!((l.grid, l.cluster, l.stage), (2, cl, sampler_kernels::spec::cluster_slice(v, cl)));
            for k in ["force_topn_stream", "topn_chunk_stream", "topn_merge_stream", "mask_check", "topn_merge"] {
                assert!(!names.contains(&k), "{names:?}");
            }
            assert!(prog.launches.iter().filter(|l| l.spec.name != "topn_cluster").all(|l| l.cluster == 1));
            // With the fused tail on (one-row groups, a kept head): one node to N = 1024, two above.
            let caps = Caps { cluster: cl, cluster_tail: true, fused_max: u32::MAX, ..stream_caps(sc) };
            let prog = build(&p, None, &caps).unwrap();
            let names = prog.kernel_names();
            if width <= 1024 {
                assert_eq!(names, ["topn_cluster_draw_finish"], "width {width}");
                let l = &prog.launches[0];
                assert_eq!((l.grid, l.cluster, l.stage), (2, cl, sampler_kernels::spec::cluster_slice(v, cl)));
            } else {
                assert_eq!(names, ["topn_cluster", "process_draw_finish"], "width {width}");
            }
        }
    }
    // A grammar mask: the mask check writes the masked rows; no cluster.
    let mut masked = reqs[0].clone();
    masked.masks = Some(vec![vec![u32::MAX; v.div_ceil(32) as usize]]);
    let (p, _) = build_plan(v, 1024, 5, &logits[..v as usize], &[masked]).unwrap();
    let names = build(&p, None, &Caps { cluster: 8, ..stream_caps(0) }).unwrap().kernel_names();
    assert!(!names.contains(&"topn_cluster"), "{names:?}");
}

/// Several blocks a row also where a chunk holds fewer than N logits (each
/// chunk takes the threshold of the row's N, so the merge stays exact; the
/// GPU's check: `gpu_suite adversarial`'s short chunks): V = 8195 over 8
/// blocks is chunks of 1025 and a last one of 1020 < N = 1024.
#[test]
fn stream_chunks_also_shorter_than_n() {
    let plain = SamplingParams { top_k: 20, seq_seed: Some(4), ..Default::default() };
    for v in [8195u32, 8199, 1024 * 8 - 1, 129280] {
        let reqs = vec![Request::prefill(plain.clone(), 5)];
        let logits: Vec<f32> = (0..v as usize).map(|i| (i % 97) as f32 * 0.01).collect();
        let (p, _) = build_plan(v, 1024, 5, &logits, &reqs).unwrap();
        let prog = build(&p, None, &stream_caps(8)).unwrap();
        let names = prog.kernel_names();
        assert!(names.contains(&"topn_chunk_stream") && !names.contains(&"force_topn_stream"), "V = {v}: {names:?}");
        let l = prog.launches.iter().find(|l| l.spec.name == "topn_chunk_stream").unwrap();
        assert_eq!(l.grid, 8, "V = {v}");
    }
}

/// The CPU device with its caps but `counts_in_topn`, `stream_select` (and
/// `stream_chunks`, 0 unless given by [`CountsAs::chunked`], and
/// `cluster`, the cluster top-N's CTAs a row) as given.
struct CountsAs(crate::runtime::device::cpu::CpuDevice, bool, bool, u32, u32);

impl CountsAs {
    /// The streaming top-N over `c` blocks a row.
    fn chunked(c: u32) -> CountsAs {
        CountsAs(Default::default(), false, true, c, 0)
    }
}

/// `CountsAs` with the fused kernels on at every width (as on CUDA):
/// `process_draw_head` and `token_info_top` over the kept head when the
/// prefix is partly ordered, `finalize_info_top` on steps of one-row groups,
/// or with `.1` ([`Caps::fold_tail`]) `process_draw_finish` /
/// `prefix_draw_finish` there instead.
struct Fused(CountsAs, bool);

impl Device for Fused {
    fn name(&self) -> &'static str {
        "cpu-fused"
    }
    fn caps(&self, v: u32, n: u32, rows: u32) -> Caps {
        Caps { fused_max: 16384, fold_tail: self.1, ..self.0.caps(v, n, rows) }
    }
    fn alloc(&mut self, buf: Buf, len: usize) -> Result<(), BackendError> {
        self.0.alloc(buf, len)
    }
    fn upload(&mut self, buf: Buf, data: HostSlice<'_>) -> Result<(), BackendError> {
        self.0.upload(buf, data)
    }
    fn fill(&mut self, buf: Buf, len: usize, value: LaunchArg<()>) -> Result<(), BackendError> {
        self.0.fill(buf, len, value)
    }
    fn bind_logits(&mut self, plan: &StepPlan) -> Result<(), BackendError> {
        self.0.bind_logits(plan)
    }
    fn launch(&mut self, l: &Launch) -> Result<(), BackendError> {
        self.0.launch(l)
    }
    fn download(&mut self, buf: Buf, offset: usize, out: HostSliceMut<'_>) -> Result<(), BackendError> {
        self.0.download(buf, offset, out)
    }
}

impl Device for CountsAs {
    fn name(&self) -> &'static str {
        "cpu-counts-as"
    }
    fn caps(&self, v: u32, n: u32, rows: u32) -> Caps {
        Caps {
            counts_in_topn: self.1,
            stream_select: self.2,
            stream_chunks: self.3,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: self.4,
            cluster_tail: self.4 > 1,
            pdl: false,
            pdl_max_ctas: 0,
            ..self.0.caps(v, n, rows)
        }
    }
    fn alloc(&mut self, buf: Buf, len: usize) -> Result<(), BackendError> {
        self.0.alloc(buf, len)
    }
    fn upload(&mut self, buf: Buf, data: HostSlice<'_>) -> Result<(), BackendError> {
        self.0.upload(buf, data)
    }
    fn fill(&mut self, buf: Buf, len: usize, value: LaunchArg<()>) -> Result<(), BackendError> {
        self.0.fill(buf, len, value)
    }
    fn bind_logits(&mut self, plan: &StepPlan) -> Result<(), BackendError> {
        self.0.bind_logits(plan)
    }
    fn launch(&mut self, l: &Launch) -> Result<(), BackendError> {
        self.0.launch(l)
    }
    fn download(&mut self, buf: Buf, offset: usize, out: HostSliceMut<'_>) -> Result<(), BackendError> {
        self.0.download(buf, offset, out)
    }
}

/// Whole steps on the CPU with the counted top-N and with the mask
/// check give the same results, row statuses included: rows with NaN
/// (both signs), +inf, all -inf, -0.0 and denormals beside ordinary
/// rows, on the full-row and the prefix path (force top-k on and off).
#[test]
fn counted_steps_equal_mask_checked_steps() {
    let v = 3000u32;
    let specials =
        [f32::NAN, -f32::NAN, f32::from_bits(0xff80_0001), f32::INFINITY, f32::NEG_INFINITY, -0.0, f32::from_bits(1)];
    let mut seen = [0usize; 3];
    for (force, top_k) in [(v, 20), (64, 20), (v, -1), (1024, 50)] {
        let p = SamplingParams { top_k, seq_seed: Some(7), top_logprobs: 3, ..Default::default() };
        let rows = 8usize;
        let mut logits: Vec<f32> = (0..rows * v as usize).map(|i| ((i * 7919) % 1009) as f32 * 0.01 - 5.0).collect();
        for r in 0..rows {
            let row = &mut logits[r * v as usize..(r + 1) * v as usize];
            match r {
                0 => row[17] = f32::NAN,
                1 => row[2999] = f32::INFINITY,
                2 => row.iter_mut().for_each(|x| *x = f32::NEG_INFINITY),
                3 => row.iter_mut().enumerate().for_each(|(i, x)| *x = specials[i % specials.len()]),
                4 => {
                    row.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                    row[5] = f32::from_bits(0xff80_0001); // a NaN in -inf's 12-bit bin
                }
                5 => {
                    row.iter_mut().enumerate().for_each(|(i, x)| *x = if i % 2 == 0 { -0.0 } else { f32::from_bits(1) })
                }
                6 => row.iter_mut().take(2000).for_each(|x| *x = f32::NEG_INFINITY),
                _ => {}
            }
        }
        let reqs: Vec<Request> = (0..rows).map(|_| Request::prefill(p.clone(), 4)).collect();
        let (plan, _) = build_plan(v, force, 5, &logits, &reqs).unwrap();
        let on = run_step(&mut CountsAs(Default::default(), true, false, 0, 0), &plan, false).unwrap();
        let off = run_step(&mut CountsAs(Default::default(), false, false, 0, 0), &plan, false).unwrap();
        assert_eq!(format!("{on:?}"), format!("{off:?}"), "force {force}, top_k {top_k}");
        // The streaming top-N (its CPU lowering is the exact op): the same steps.
        let stream = run_step(&mut CountsAs(Default::default(), false, true, 0, 0), &plan, false).unwrap();
        assert_eq!(format!("{stream:?}"), format!("{off:?}"), "stream select, force {force}, top_k {top_k}");
        // Over several blocks a row (stage 1 keeps each chunk's candidates, stage 2 merges them).
        for c in [2u32, 3, 7] {
            let chunked = run_step(&mut CountsAs::chunked(c), &plan, false).unwrap();
            assert_eq!(
                format!("{chunked:?}"),
                format!("{off:?}"),
                "stream over {c} chunks, force {force}, top_k {top_k}"
            );
        }
        // A row over the CTAs of a cluster (its CPU lowering: the exact op, the rest reversed).
        let cl = run_step(&mut CountsAs(Default::default(), false, true, 0, 8), &plan, false).unwrap();
        assert_eq!(format!("{cl:?}"), format!("{off:?}"), "cluster top-N, force {force}, top_k {top_k}");
        for &s in &on.row_status {
            seen[s as usize] += 1;
        }
    }
    assert!(seen.iter().all(|&s| s > 0), "statuses 0, 1 and 2 all seen: {seen:?}");
}

/// Section 10-11 launches: `tree_walk` right after `finalize` only with a
/// tree, `raw_logprobs` last only with a raw row, for every device order;
/// and the tree's draft inputs are bound even without chain verify rows.
#[test]
fn tree_and_raw_launches_follow_the_plan() {
    let v = 5000u32;
    let raw =
        SamplingParams { logprobs_mode: LogprobsMode::Raw, top_logprobs: 2, seq_seed: Some(3), ..Default::default() };
    let plain = SamplingParams { top_k: 20, seq_seed: Some(4), ..Default::default() };
    let tree =
        DraftTree { parent: vec![-1, 0, 0, 2], tokens: vec![0, 1, 3], draft_dists: None, without_replacement: false };
    let caps = [
        Caps {
            mask_chunk: None,
            topn_chunks: 1,
            fused_max: 0,
            counts_in_topn: false,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        },
        Caps {
            mask_chunk: Some(8192),
            topn_chunks: 1,
            fused_max: 0,
            counts_in_topn: false,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        },
        Caps {
            mask_chunk: Some(4096),
            topn_chunks: 2,
            fused_max: u32::MAX,
            counts_in_topn: false,
            stream_select: false,
            stream_chunks: 0,
            prefix_order: true,
            kept_head: true,
            fold_finalize: true,
            fold_tail: true,
            head_tile: 1024,
            cluster: 0,
            cluster_tail: false,
            pdl: false,
            pdl_max_ctas: 0,
        },
    ];
    for (reqs, any_tree, any_raw) in [
        (vec![Request::prefill(plain.clone(), 5)], false, false),
        (vec![Request::prefill(raw.clone(), 5), Request::tree(plain.clone(), 20, tree.clone())], true, true),
        (vec![Request::tree(raw, 20, tree.clone())], true, true),
    ] {
        let rows: usize = reqs.iter().map(|r| r.rows()).sum();
        let logits: Vec<f32> = (0..rows * v as usize).map(|i| (i % 97) as f32 * 0.01).collect();
        let (p, infos) = build_plan(v, 1024, 5, &logits, &reqs).unwrap();
        assert!(infos.iter().all(|i| i.params.is_ok()), "{infos:?}");
        assert_eq!((p.any_tree, p.any_raw), (any_tree, any_raw));
        for c in &caps {
            let prog = build(&p, None, c).unwrap();
            let names = prog.kernel_names();
            let at = |k: &str| names.iter().position(|n| *n == k);
            assert_eq!(at("tree_walk").is_some(), any_tree, "{names:?}");
            assert_eq!(at("raw_logprobs").is_some(), any_raw, "{names:?}");
            if any_tree {
                assert_eq!(at("tree_walk"), at("finalize").map(|f| f + 1), "{names:?}");
                assert!(prog.bufs.iter().any(|b| b.buf == Buf::SeqAccept), "tree_walk reads seq_accept");
            }
            if any_raw {
                assert_eq!(at("raw_logprobs"), Some(names.len() - 1), "{names:?}");
            }
            // The mask check: mask_check, or mask_check_chunk + status_merge whenever a chunk
            // size is given, the merge of the chunked top-N doing status_merge's work.
            assert_eq!(at("mask_check").is_some(), c.mask_chunk.is_none(), "{names:?}");
            assert_eq!(at("status_merge"), c.mask_chunk.filter(|_| c.topn_chunks <= 1).map(|_| 1), "{names:?}");
            assert_eq!(at("topn_merge").is_some(), c.topn_chunks > 1, "{names:?}");
        }
    }
}

/// `Caps::prefix_order`: every golden case on the CPU through the streaming
/// top-N (one block a row, and over 3 blocks) with only each row's kept
/// prefix in order. The CPU lowering reverses the rest of each row's N, so a
/// kernel or output that read past the prefix would differ from the CPU
/// backend's steps (which sort all N); and `sorted_prefix` is below N on
/// most of them (top-k on in every row, no verify, tree or returned
/// distribution), n elsewhere.
#[cfg(feature = "conformance")]
#[test]
fn golden_steps_with_only_the_kept_prefix_ordered_equal_the_cpu() {
    use crate::conformance::case::{golden_files, parse_case, GOLDEN_DIR};
    let files = golden_files(std::path::Path::new(GOLDEN_DIR));
    assert!(files.len() >= 50, "golden cases at {GOLDEN_DIR}: {}", files.len());
    let (mut partial, mut full, mut heads, mut folds) = (0usize, 0usize, 0usize, 0usize);
    let (mut finishes, mut prefix_finishes, mut cluster_tails) = (0usize, 0usize, 0usize);
    for f in &files {
        let case = parse_case(&std::fs::read_to_string(f).unwrap()).unwrap();
        let (reqs, logits) = case.well_formed();
        let Ok((p, _)) = build_plan(case.vocab_size, case.width(), case.nextn, &logits[..], &reqs) else { continue };
        for full_row in [false, true] {
            let want = run_step(&mut crate::runtime::device::cpu::CpuDevice::default(), &p, full_row).unwrap();
            // One block a row, three, and a cluster of 8 CTAs a row.
            for (chunks, cl) in [(0u32, 0u32), (3, 0), (0, 8)] {
                let mut dev = CountsAs(Default::default(), false, true, chunks, cl);
                let got = run_step(&mut dev, &p, full_row).unwrap();
                assert_eq!(
                    format!("{got:?}"),
                    format!("{want:?}"),
                    "{} full_row {full_row} chunks {chunks} cluster {cl}",
                    f.display()
                );
                for tail in [false, true] {
                    let mut dev = Fused(CountsAs(Default::default(), false, true, chunks, cl), tail);
                    let got = run_step(&mut dev, &p, full_row).unwrap();
                    assert_eq!(
                        format!("{got:?}"),
                        format!("{want:?}"),
                        "{} full_row {full_row} chunks {chunks} cluster {cl}, fused, fold_tail {tail}",
                        f.display()
                    );
                }
            }
            let width = PrefixPolicy::eager(full_row).width(&p);
            let fcaps = Fused(CountsAs(Default::default(), false, true, 0, 0), false).caps(p.vocab, p.n, p.rows);
            let names = build(&p, width, &fcaps).unwrap().kernel_names();
            heads += names.contains(&"process_draw_head") as usize;
            folds += names.contains(&"finalize_info_top") as usize;
            let ccaps = Fused(CountsAs(Default::default(), false, true, 0, 8), true).caps(p.vocab, p.n, p.rows);
            cluster_tails +=
                build(&p, width, &ccaps).unwrap().kernel_names().contains(&"topn_cluster_draw_finish") as usize;
            let fcaps = Fused(CountsAs(Default::default(), false, true, 0, 0), true).caps(p.vocab, p.n, p.rows);
            let tnames = build(&p, width, &fcaps).unwrap().kernel_names();
            finishes += tnames.contains(&"process_draw_finish") as usize;
            prefix_finishes += tnames.contains(&"prefix_draw_finish") as usize;
            // One node less where the tail folds: the folded finalize on the
            // prefix path or over a partial head.
            let one = tnames.contains(&"process_draw_finish") || tnames.contains(&"prefix_draw_finish");
            let want_one = names.contains(&"finalize_info_top")
                && (names.contains(&"process_draw_head") || names.contains(&"process_prefix_draw"));
            assert_eq!(one, want_one, "{}: {names:?} -> {tnames:?}", f.display());
            assert_eq!(tnames.len() + one as usize, names.len(), "{}: {names:?} -> {tnames:?}", f.display());
            let caps = CountsAs(Default::default(), false, true, 0, 0).caps(p.vocab, p.n, p.rows);
            let width = PrefixPolicy::eager(full_row).width(&p);
            let prog = build(&p, width, &caps).unwrap();
            if let Some(l) = prog.launches.iter().find(|l| l.spec.name == "force_topn_stream") {
                let at = l.spec.params.iter().position(|q| q.name == "sorted").unwrap();
                match l.args[at] {
                    LaunchArg::U32(s) if s < prog.width => partial += 1,
                    LaunchArg::U32(_) => full += 1,
                    ref a => panic!("sorted {a:?}"),
                }
            }
        }
    }
    eprintln!("prefix order: {partial} streamed steps with a partial order, {full} fully sorted");
    assert!(partial >= 5 && full >= 5, "both kinds of steps ran: {partial} partial, {full} full");
    eprintln!("fused: process_draw_head in {heads} steps, finalize_info_top in {folds}");
    assert!(heads >= 5 && folds >= 20, "head kernels in {heads} steps, the folded finalize in {folds}");
    eprintln!("fold_tail: process_draw_finish in {finishes} steps, prefix_draw_finish in {prefix_finishes}");
    assert!(finishes >= 5 && prefix_finishes >= 3, "{finishes} and {prefix_finishes} steps with one tail node");
    assert!(cluster_tails >= 1, "{cluster_tails} steps of one topn_cluster_draw_finish node");
}

/// `sorted_prefix`: the kept prefix (max top-k or top logprobs, a power of
/// two from 64, at most n) only when every row has top-k on and nothing
/// reads past it; n otherwise.
#[test]
fn sorted_prefix_covers_top_k_and_top_logprobs() {
    let v = 9000u32;
    let logits: Vec<f32> = (0..3 * v as usize).map(|i| (i % 89) as f32 * 0.02).collect();
    let caps = CountsAs(Default::default(), false, true, 0, 0).caps(v, 1024, 3);
    let step = |ks: &[i64], lp: u32| {
        let reqs: Vec<Request> = ks
            .iter()
            .map(|&k| {
                Request::prefill(
                    SamplingParams { top_k: k, top_logprobs: lp, seq_seed: Some(1), ..Default::default() },
                    4,
                )
            })
            .collect();
        build_plan(v, 1024, 5, &logits[..reqs.len() * v as usize], &reqs).unwrap().0
    };
    assert_eq!(sorted_prefix(&step(&[50, 20], 5), 1024, false, &caps), 64);
    assert_eq!(sorted_prefix(&step(&[50, 100], 5), 1024, false, &caps), 128);
    assert_eq!(sorted_prefix(&step(&[5], 200), 1024, false, &caps), 256);
    assert_eq!(sorted_prefix(&step(&[50, -1], 5), 1024, false, &caps), 1024);
    assert_eq!(sorted_prefix(&step(&[2000], 5), 1024, false, &caps), 1024);
    assert_eq!(sorted_prefix(&step(&[50], 5), 1024, true, &caps), 1024);
    assert_eq!(sorted_prefix(&step(&[50], 5), 1024, false, &Caps { prefix_order: false, ..caps }), 1024);
    assert_eq!(sorted_prefix(&step(&[50], 5), 32, false, &caps), 32);
}

/// `Caps::prefix_order` on mixed batches (top-k 1..300, top-p, min-p, both
/// filter orders, top logprobs up to 40, ties, a golden row) at N = 256,
/// 1024 and 2048: the streaming top-N with the rest of each row's N reversed
/// (CPU lowering) gives the CPU backend's steps bit for bit.
#[test]
fn mixed_batches_with_only_the_kept_prefix_ordered_equal_the_cpu() {
    use crate::params::FilterOrder;
    let v = 6000u32;
    let (mut partial, mut cluster_tails) = (0, 0);
    for (case, n) in [256u32, 1024, 2048].into_iter().enumerate().flat_map(|(i, n)| (0..6).map(move |j| (i * 6 + j, n)))
    {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ case as u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let rows = 1 + (rnd() % 6) as usize;
        let reqs: Vec<Request> = (0..rows)
            .map(|r| {
                let p = SamplingParams {
                    temperature: [0.7, 1.0, 1.3, 1e-5][(rnd() % 4) as usize],
                    top_p: [1.0, 0.9, 0.5, 0.99][(rnd() % 4) as usize],
                    top_k: [1, 5, 50, 64, 65, 300][(rnd() % 6) as usize],
                    min_p: [0.0, 0.05][(rnd() % 2) as usize],
                    filter_order: if rnd() % 2 == 0 { FilterOrder::TopPThenTopK } else { FilterOrder::TopKThenTopP },
                    top_logprobs: (case % 5) as u32 * 10,
                    seq_seed: Some(rnd()),
                    ..Default::default()
                };
                let mut q = Request::prefill(p, 4 + r as u64);
                if r == 1 && case % 3 == 0 {
                    q.golden = vec![(rnd() % v as u64) as i32];
                }
                q
            })
            .collect();
        // Quantized logits (ties across ids), one row with a wide plateau.
        let logits: Vec<f32> = (0..rows * v as usize)
            .map(
                |i| if i / v as usize == 0 && i % 7 == 0 { 3.0 } else { ((rnd() % 4000) as f32 * 0.001).round() * 0.5 },
            )
            .collect();
        let (p, _) = build_plan(v, n, 5, &logits, &reqs).unwrap();
        let caps = CountsAs(Default::default(), false, true, 0, 0).caps(v, n, p.rows);
        partial += (sorted_prefix(&p, n, false, &caps) < n) as usize;
        let ccaps = Fused(CountsAs(Default::default(), false, true, 0, 4), true).caps(v, n, p.rows);
        cluster_tails += build(&p, None, &ccaps).unwrap().kernel_names().contains(&"topn_cluster_draw_finish") as usize;
        for full_row in [false, true] {
            let want = run_step(&mut crate::runtime::device::cpu::CpuDevice::default(), &p, full_row).unwrap();
            for (chunks, cl) in [(0u32, 0u32), (2, 0), (0, 4)] {
                let got = run_step(&mut CountsAs(Default::default(), false, true, chunks, cl), &p, full_row).unwrap();
                assert_eq!(
                    format!("{got:?}"),
                    format!("{want:?}"),
                    "case {case} n {n} full_row {full_row} chunks {chunks} cluster {cl}"
                );
                for tail in [false, true] {
                    let mut dev = Fused(CountsAs(Default::default(), false, true, chunks, cl), tail);
                    let got = run_step(&mut dev, &p, full_row).unwrap();
                    assert_eq!(
                        format!("{got:?}"),
                        format!("{want:?}"),
                        "case {case} n {n} full_row {full_row} chunks {chunks}, fused, fold_tail {tail}"
                    );
                }
            }
        }
    }
    assert!(partial >= 10, "steps with a partial order: {partial}");
    assert!(cluster_tails >= 4, "steps of one topn_cluster_draw_finish node: {cluster_tails}");
}
