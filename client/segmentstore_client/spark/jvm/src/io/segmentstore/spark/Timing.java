// Timing lines for measuring where a read's time goes, off unless the JVM runs with
// -Dsegmentstore.jvm.timing=true (e.g. spark.driver.extraJavaOptions): one line per
// measured step on stderr, "segmentstore-jvm timing <step> <ms> ms <detail>". Costs one
// static boolean check per step when off.
package io.segmentstore.spark;

final class Timing {
  static final boolean ON = Boolean.getBoolean("segmentstore.jvm.timing");

  private Timing() {}

  static long now() {
    return ON ? System.nanoTime() : 0;
  }

  /** Logs the milliseconds since {@code since} (a {@link #now()}). */
  static void log(String step, long since, String detail) {
    if (ON) {
      System.err.printf(
          "segmentstore-jvm timing %s %.2f ms %s%n", step, (System.nanoTime() - since) / 1e6,
          detail);
    }
  }
}
