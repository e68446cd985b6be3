//! Host side of the sampler.
