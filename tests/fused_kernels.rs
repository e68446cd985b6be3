//! The fused kernels the CUDA backend launches (`process_draw`,
//! `process_prefix_draw`, `token_info_top`) against the kernels they fuse,
//! bit for bit, on the CPU (same DSL source as the PTX). The GPU round also
//! compares the CUDA results (fused) with the CPU backend (unfused).

mod common;

use common::gen::{random_row, Rng};
use sampler_kernels::kernels as k;
use sampler_kernels::rt::cpu::Gm;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn fused_kernels_equal_the_kernels_they_fuse() {
    let mut rng = Rng::new(99);
    let mut cases = 0;
    for rep in 0..300u64 {
        let v = rng.pick(&[5usize, 64, 300, 1000, 3000]);
        let n = (rng.range(1, v as u64 + 1) as u32).min(v as u32);
        let logits = random_row(&mut rng, v);
        // Candidates in order, as force_topn gives them.
        let (mut cand, mut ids) = (vec![0f32; n as usize], vec![0i32; n as usize]);
        unsafe { k::force_topn::cpu(0, Gm::new(&logits), v as u32, n, Gm::new_mut(&mut cand), Gm::new_mut(&mut ids)) };
        let t = [rng.pick(&[1e-5f32, 0.3, 0.7, 1.0, 2.0])];
        let tp = [rng.pick(&[0.05f32, 0.5, 0.9, 1.0])];
        let tk = [rng.pick(&[-1i32, 1, 5, 50])];
        let (seed, seq) = ([rng.next_u64()], [rng.next_u64() >> 2]);
        // process + draw vs process_draw
        let (mut lp1, mut tok1) = (vec![0f32; n as usize], [0i32]);
        unsafe {
            k::process::cpu(0, Gm::new(&cand), n, Gm::new(&t), Gm::new(&tp), Gm::new(&tk), Gm::new_mut(&mut lp1));
            k::draw::cpu(0, Gm::new(&lp1), Gm::new(&ids), n, Gm::new(&seed), Gm::new(&seq), Gm::new_mut(&mut tok1));
        }
        let (mut lp2, mut tok2) = (vec![0f32; n as usize], [0i32]);
        unsafe {
            k::process_draw::cpu(0, Gm::new(&cand), Gm::new(&ids), n, Gm::new(&t), Gm::new(&tp), Gm::new(&tk), Gm::new(&seed), Gm::new(&seq), Gm::new_mut(&mut lp2), Gm::new_mut(&mut tok2));
        }
        assert_eq!((bits(&lp1), tok1), (bits(&lp2), tok2), "rep {rep}: process_draw");
        // process_prefix + draw vs process_prefix_draw (the mass of the whole row)
        let mass = {
            let mut m = [0u64];
            unsafe { k::row_mass::cpu(0, Gm::new(&logits), v as u32, v as u32, 1, Gm::new(&cand), n, Gm::new(&t), Gm::new_mut(&mut m)) };
            m
        };
        let (mut lp3, mut of3, mut tok3) = (vec![0f32; n as usize], [0u32], [0i32]);
        unsafe {
            k::process_prefix::cpu(0, Gm::new(&cand), n, v as u32, Gm::new(&mass), 1, Gm::new(&t), Gm::new(&tp), Gm::new(&tk), Gm::new_mut(&mut lp3), Gm::new_mut(&mut of3));
            k::draw::cpu(0, Gm::new(&lp3), Gm::new(&ids), n, Gm::new(&seed), Gm::new(&seq), Gm::new_mut(&mut tok3));
        }
        let (mut lp4, mut of4, mut tok4) = (vec![0f32; n as usize], [0u32], [0i32]);
        unsafe {
            k::process_prefix_draw::cpu(
                0, Gm::new(&cand), Gm::new(&ids), n, v as u32, Gm::new(&mass), 1, Gm::new(&t), Gm::new(&tp), Gm::new(&tk),
                Gm::new(&seed), Gm::new(&seq), Gm::new_mut(&mut lp4), Gm::new_mut(&mut of4), Gm::new_mut(&mut tok4),
            );
        }
        assert_eq!((bits(&lp3), of3, tok3), (bits(&lp4), of4, tok4), "rep {rep}: process_prefix_draw");
        if n as usize == v {
            // All V candidates: the prefix path is the full path.
            assert_eq!(bits(&lp3), bits(&lp1), "rep {rep}: process_prefix with n = V differs from process");
        }
        // token_info + top_logprobs vs token_info_top
        let kk = rng.range(0, n.min(6) as u64 + 1) as u32;
        let tok = [if rng.chance(0.8) { tok1[0] } else { rng.below(v) as i32 }];
        let (mut tl1, mut ss1, mut oi1, mut ol1) = ([0f32], [0f32], vec![0i32; kk as usize], vec![0f32; kk as usize]);
        unsafe {
            k::token_info::cpu(0, Gm::new(&cand), Gm::new(&ids), Gm::new(&lp1), n, Gm::new(&tok), Gm::new_mut(&mut tl1), Gm::new_mut(&mut ss1));
            k::top_logprobs::cpu(0, Gm::new(&ids), Gm::new(&lp1), n, kk, Gm::new_mut(&mut oi1), Gm::new_mut(&mut ol1));
        }
        let (mut tl2, mut ss2, mut oi2, mut ol2) = ([0f32], [0f32], vec![0i32; kk as usize], vec![0f32; kk as usize]);
        unsafe {
            k::token_info_top::cpu(
                0, Gm::new(&cand), Gm::new(&ids), Gm::new(&lp1), n, Gm::new(&tok), kk,
                Gm::new_mut(&mut tl2), Gm::new_mut(&mut ss2), Gm::new_mut(&mut oi2), Gm::new_mut(&mut ol2),
            );
        }
        assert_eq!((bits(&tl1), bits(&ss1), &oi1, bits(&ol1)), (bits(&tl2), bits(&ss2), &oi2, bits(&ol2)), "rep {rep}: token_info_top");
        cases += 1;
    }
    assert_eq!(cases, 300);
}
