p='sampler-kernels/src/rt/gpu/cluster.rs'
s=open(p).read()
def rep(a,b,cnt=1):
    global s
    assert s.count(a)==cnt, (s.count(a), a)
    s=s.replace(a,b)
# helper fns at end
s += '''
/// Timing only: thread 0 stamps `%clock` into misc word 100 + k.
#[inline(always)]
fn stamp(tid: u32, k: u32) {
    if tid == 0 {
        let t: u32;
        // SAFETY: reads a special register (not pure: keeps its place).
        unsafe { core::arch::asm!("mov.u32 {t}, %clock;", t = out(reg32) t) };
        sts32(misc(100 + k), t);
    }
}
/// Timing only: thread 0 prints this CTA's stamps (cycles after stamp 0).
#[inline(always)]
fn stamps_print(tid: u32, q: u32) {
    if tid == 0 {
        let mut a = [0u32; 28];
        let t0 = lds32(misc(100));
        a[0] = q;
        a[1] = super::ptx::ctaid_x();
        let mut k = 1u32;
        while k < 26 {
            let t = lds32(misc(100 + k));
            a[(k + 1) as usize] = if t == 0 { 0 } else { t.wrapping_sub(t0) };
            k += 1;
        }
        // SAFETY: a NUL-terminated format of 27 %u, a buffer of 28 u32.
        unsafe {
            core::arch::nvptx::vprintf(
                b"TS %u %u | %u %u %u | %u %u %u %u | %u %u %u %u | %u %u %u %u | %u %u %u %u %u %u %u | %u %u %u\\n\\0".as_ptr(),
                a.as_ptr() as *const core::ffi::c_void,
            );
        }
    }
}
'''
rep("""    let tid = c.tid;
    let (lane, warp) = (tid & 31, tid >> 5);
    let start = (q * slice_len).min(v);""","""    let tid = c.tid;
    if tid < 28 {
        sts32(misc(100 + tid), 0);
    }
    sync();
    stamp(tid, 0);
    let (lane, warp) = (tid & 31, tid >> 5);
    let start = (q * slice_len).min(v);""")
rep("""    sync();
    cluster_arrive();
    let (bad, neg) = match buf.as_f32() {""","""    sync();
    stamp(tid, 1);
    cluster_arrive();
    let (bad, neg) = match buf.as_f32() {""")
rep("""    sync();
    cluster_wait();
    if tid == 0 {
        redc_add(mapa(misc(M_BAD), 0), lds32(misc(M_LBAD)));""","""    sync();
    stamp(tid, 2);
    cluster_wait();
    stamp(tid, 3);
    if tid == 0 {
        redc_add(mapa(misc(M_BAD), 0), lds32(misc(M_LBAD)));""")
rep("""            sync();
        }
        // This CTA's nonzero bins into the merged histograms""","""            sync();
        }
        stamp(tid, 4 + 4 * p);
        // This CTA's nonzero bins into the merged histograms""")
rep("""        cluster_arrive_relaxed();
        cluster_wait();
        // Every CTA finds the boundaries itself""","""        stamp(tid, 5 + 4 * p);
        cluster_arrive_relaxed();
        cluster_wait();
        stamp(tid, 6 + 4 * p);
        // Every CTA finds the boundaries itself""")
rep("""        if tie0 || tie1 {
            sync();
        }
        p += 1;""","""        if tie0 || tie1 {
            sync();
        }
        stamp(tid, 7 + 4 * p);
        p += 1;""")
rep("""    cluster_arrive_relaxed();
    // This CTA's share of each""","""    cluster_arrive_relaxed();
    stamp(tid, 16);
    // This CTA's share of each""")
rep("""    cluster_wait();
    // One walk stages this CTA's kept keys""","""    stamp(tid, 17);
    cluster_wait();
    stamp(tid, 18);
    // One walk stages this CTA's kept keys""")
rep("""    sync();
    // Then into the leader's buffers at offsets from one remote atomic each.""","""    sync();
    stamp(tid, 19);
    // Then into the leader's buffers at offsets from one remote atomic each.""")
rep("""    let (bp, bq) = (lds32(misc(M_BASE)), lds32(misc(M_BASE + 1)));""","""    let (bp, bq) = (lds32(misc(M_BASE)), lds32(misc(M_BASE + 1)));
    stamp(tid, 20);""")
rep("""    if tid == 0 || tid < tp || tid < tq {
        fence_cluster();
    }
    cluster_arrive_relaxed();
    cluster_wait();
    if q != 0 {
        return empty();
    }""","""    stamp(tid, 21);
    if tid == 0 || tid < tp || tid < tq {
        fence_cluster();
    }
    cluster_arrive_relaxed();
    cluster_wait();
    stamp(tid, 22);
    if q != 0 {
        stamps_print(tid, q);
        return empty();
    }""")
rep("""        sync();
        bitonic_desc(c, pbuf, p2);
    }""","""        sync();
        bitonic_desc(c, pbuf, p2);
    }
    stamp(tid, 23);""")
rep("""    let (bad, neg) = (lds32(misc(M_BAD)), lds32(misc(M_NEG)));
    sync();
    let (x, id) = split_keys(&Tile { v: out, n });""","""    let (bad, neg) = (lds32(misc(M_BAD)), lds32(misc(M_NEG)));
    sync();
    let (x, id) = split_keys(&Tile { v: out, n });
    stamp(tid, 24);
    stamps_print(tid, q);""")
open(p,'w').write(s)
