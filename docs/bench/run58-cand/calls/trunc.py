import sys
t=sys.argv[1]
p='sampler-kernels/src/rt/gpu/cluster.rs'
s=open(p).read()
def rep(a,b):
    global s
    assert s.count(a)==1, a
    s=s.replace(a,b)
rep("const HB: u32 = 2048;", "const HB: u32 = 2048;\n/// Timing only: stop after phase TRUNC.\nconst TRUNC: u32 = %s;" % t)
rep("    let empty = || (Tile { v: [0f32; I], n: 0 }, Tile { v: [0i32; I], n: 0 }, 0u32, 0u32, 0u32);\n",
    "    let empty = || (Tile { v: [0f32; I], n: 0 }, Tile { v: [0i32; I], n: 0 }, 0u32, 0u32, 0u32);\n    if TRUNC == 10 {\n        return empty();\n    }\n")
rep("    sync();\n    cluster_arrive();\n", "    sync();\n    cluster_arrive();\n    if TRUNC == 1 {\n        cluster_wait();\n        return empty();\n    }\n")
rep("        p += 1;\n    }\n", "        p += 1;\n        if TRUNC == 3 {\n            break;\n        }\n    }\n")
rep("    cluster_arrive_relaxed();\n    // This CTA's share", "    cluster_arrive_relaxed();\n    if TRUNC == 3 || TRUNC == 4 {\n        cluster_wait();\n        return empty();\n    }\n    // This CTA's share")
rep("    if q != 0 {\n        return empty();\n    }\n    let sp = if two", "    if q != 0 || TRUNC == 5 {\n        return empty();\n    }\n    let sp = if two")
open(p,'w').write(s)
s=open(p).read()
def rep2(a,b):
    global s
    assert s.count(a)==1, a
    s=s.replace(a,b)
rep2("    // Then into the leader's buffers at offsets from one remote atomic each.\n",
     "    if TRUNC == 6 {\n        cluster_arrive();\n        cluster_wait();\n        return empty();\n    }\n    // Then into the leader's buffers at offsets from one remote atomic each.\n")
rep2("    let (bp, bq) = (lds32(misc(M_BASE)), lds32(misc(M_BASE + 1)));\n",
     "    let (bp, bq) = (lds32(misc(M_BASE)), lds32(misc(M_BASE + 1)));\n    if TRUNC == 7 {\n        cluster_arrive();\n        cluster_wait();\n        return empty();\n    }\n")
open(p,'w').write(s)
