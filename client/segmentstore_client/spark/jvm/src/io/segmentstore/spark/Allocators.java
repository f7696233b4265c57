// The Arrow memory of this jar's tasks, in one place per JVM: every read task, write task
// and schema inference allocates from its own child of one root, so what they leave
// allocated (a vector or a root not closed) stays counted here: allocated() is 0 whenever
// none of them runs. A child is closed by its owner; closing it with memory still
// allocated throws (Arrow's leak check) and that memory stays counted in the root. The
// root has no limit (as the per-task RootAllocator(Long.MAX_VALUE) each had before) and
// is never closed; an allocation takes from it only the chunks a child asks for.
package io.segmentstore.spark;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;

final class Allocators {
  private static final RootAllocator ROOT = new RootAllocator(Long.MAX_VALUE);

  private Allocators() {}

  /** A new allocator for one task ({@code name} appears in Arrow's leak messages). */
  static BufferAllocator child(String name) {
    return ROOT.newChildAllocator(name, 0, Long.MAX_VALUE);
  }

  /** Bytes the open and the leaked children hold now (for tests and tools). */
  static long allocated() {
    return ROOT.getAllocatedMemory();
  }
}
