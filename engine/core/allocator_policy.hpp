// How the process's allocator treats the buffers a training step frees.
//
// A step allocates and frees the same few buffers every time (the logits' copy and the loss gradient,
// 2 MB each for a 64³ volume; an up-convolution's staging; the weights' gradient partials). glibc
// gives the top of its heap back to the kernel once more than its trim threshold is free, so the next
// step takes every page again as a fresh fault: the 3D U-Net's step took 1,424 page faults (5.6 MB)
// a step on the Xeon model 207, each cleared by the kernel while the other host thread waited.
// Keeping up to 256 MiB of freed heap, and serving requests below 32 MiB from it, stops that (0 faults
// a step); larger buffers (volumes, a 2D U-Net's activations) still come from and go back to mmap.
//
// A process policy, so the entry points call it (the studio, tessera-cli, the step benchmarks), not
// the engine's libraries: a program that embeds the engine keeps its own allocator settings.
#pragma once

namespace tessera {

// glibc's mallopt; elsewhere nothing. Call once, early in main. TESSERA_RETAIN_FREED_MEMORY=0 leaves
// glibc's defaults (to compare).
void retain_freed_memory();

}  // namespace tessera
