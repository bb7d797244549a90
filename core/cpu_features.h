#pragma once
// What the CPU running the process can do natively, for choices that depend on it (such as
// precis-train's --precision auto).

namespace precis {

/// Whether this CPU computes bf16 dot products natively: AVX512-BF16 (vdpbf16ps) or AMX-BF16,
/// with the operating system enabling their registers. There bf16 GEMMs and convolutions (oneDNN)
/// run at about twice the f32 rate; elsewhere bf16 operands are widened to f32 first, so bf16 saves
/// memory but little time. Queried once; false on non-x86 CPUs.
bool cpu_has_native_bf16();

}  // namespace precis
