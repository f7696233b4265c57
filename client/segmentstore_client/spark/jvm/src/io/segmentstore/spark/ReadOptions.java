// Options of the segmentstore-jvm reader: parsed and checked once, on the driver, so a typo
// or an option only the Python source supports fails the query before any task starts.
// The names and defaults follow the Python source's option table (option_table.py); keys
// arrive lowercased from Spark. Immutable and Serializable (it travels to the executors).
package io.segmentstore.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

final class ReadOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  static final long DEFAULT_PARTITION_BYTES = 16L * 1024 * 1024;

  /** Options this reader honours (lowercase key -> name as documented). */
  private static final Map<String, String> KNOWN = new TreeMap<>();

  /** Options of the Python source this reader does not implement, with the reason. */
  private static final Map<String, String> PYTHON_ONLY = new TreeMap<>();

  static {
    for (String n :
        new String[] {
          "endpoint", "segment", "segments", "path", "timeout", "connectTimeout",
          "connect_timeout", "minPartitions", "min_partitions", "partitionBytes",
          "partition_bytes", "startOffset", "start_offset", "endOffset", "end_offset",
          "columns", "schema"
        }) {
      KNOWN.put(n.toLowerCase(Locale.ROOT), n);
    }
    String[][] python = {
      {"stream", "stream reads (through the controller)"},
      {"controller", "stream reads (through the controller)"},
      {"startStreamCut", "stream reads"},
      {"endStreamCut", "stream reads"},
      {"credentials", "authentication (credentials or tokens)"},
      {"tlsCaFile", "TLS"},
      {"tlsVerify", "TLS"},
      {"tlsCertFile", "TLS"},
      {"tlsKeyFile", "TLS"},
      {"output", "output=raw and output=records"},
      {"recordFormat", "record formats"},
      {"offsetColumns", "the _segment/_offset columns"},
      {"filterPushdown", "filter pushdown"},
      {"batchRows", "batchRows"},
      {"startingOffsets", "streaming reads"},
      {"maxBytesPerTrigger", "streaming reads"},
    };
    for (String[] p : python) {
      PYTHON_ONLY.put(p[0].toLowerCase(Locale.ROOT), p[1]);
    }
  }

  final String host;
  final int port;
  final List<String> segments;
  final int timeoutMillis;
  final int connectTimeoutMillis;
  final int minPartitions;
  final long partitionBytes;
  final long startOffset; // -1: the readable start
  final long endOffset; // -1: the segment's length at planning
  final List<String> columns; // empty: all
  final String schemaDdl; // null: inferred

  private ReadOptions(Map<String, String> o) {
    String endpoint = require(o, "endpoint");
    String lower = endpoint.trim().toLowerCase(Locale.ROOT);
    if (lower.startsWith("tls://")) {
      throw refuse("a tls:// endpoint (TLS)");
    }
    String hostPort = lower.startsWith("tcp://") ? endpoint.trim().substring(6) : endpoint.trim();
    int colon = hostPort.lastIndexOf(':');
    if (colon <= 0 || colon == hostPort.length() - 1 || hostPort.contains("/")) {
      throw new IllegalArgumentException(
          "segmentstore-jvm: option 'endpoint' must be tcp://host:port, not '" + endpoint + "'");
    }
    this.host = hostPort.substring(0, colon).replace("[", "").replace("]", "");
    this.port = (int) number("endpoint", hostPort.substring(colon + 1), 1, 65535);
    List<String> segs = new ArrayList<>();
    String one = o.containsKey("segment") ? o.get("segment") : o.get("path");
    if (one != null && !one.isEmpty()) {
      segs.add(one);
    }
    String many = o.get("segments");
    if (many != null) {
      for (String s : many.split(",")) {
        if (!s.trim().isEmpty()) {
          segs.add(s.trim());
        }
      }
    }
    if (segs.isEmpty()) {
      throw new IllegalArgumentException(
          "segmentstore-jvm: option 'segment' (or 'segments') is required");
    }
    this.segments = Collections.unmodifiableList(segs);
    // At least 1 ms: Java's sockets take 0 as no limit at all.
    this.timeoutMillis = (int) Math.max(1, Math.round(seconds(o, "timeout", 60.0) * 1000));
    this.connectTimeoutMillis =
        (int) Math.max(1, Math.round(seconds(o, "connecttimeout", 5.0) * 1000));
    this.minPartitions =
        (int) optNumber(o, "minpartitions", Runtime.getRuntime().availableProcessors(), 1, 100_000);
    this.partitionBytes =
        optNumber(o, "partitionbytes", DEFAULT_PARTITION_BYTES, 1024, Long.MAX_VALUE / 4);
    this.startOffset = optNumber(o, "startoffset", -1, 0, Long.MAX_VALUE);
    this.endOffset = optNumber(o, "endoffset", -1, 0, Long.MAX_VALUE);
    List<String> cols = new ArrayList<>();
    String c = o.get("columns");
    if (c != null) {
      for (String s : c.split(",")) {
        if (!s.trim().isEmpty()) {
          cols.add(s.trim());
        }
      }
    }
    this.columns = Collections.unmodifiableList(cols);
    this.schemaDdl = o.get("schema");
  }

  /** Parses Spark's (lowercased) options; IllegalArgumentException names the bad one. */
  static ReadOptions parse(Map<String, String> raw) {
    Map<String, String> o = new TreeMap<>();
    for (Map.Entry<String, String> e : raw.entrySet()) {
      String key = e.getKey().toLowerCase(Locale.ROOT).replace("_", "");
      o.put(key, e.getValue());
    }
    for (Map.Entry<String, String> e : raw.entrySet()) {
      String key = e.getKey().toLowerCase(Locale.ROOT);
      String flat = key.replace("_", "");
      if (KNOWN.containsKey(key) || KNOWN.containsKey(flat)) {
        continue;
      }
      String why = PYTHON_ONLY.get(flat);
      if (why != null) {
        throw refuse(why + " (option '" + e.getKey() + "')");
      }
      Set<String> names = new TreeSet<>();
      for (String n : KNOWN.values()) {
        if (!n.contains("_")) {
          names.add(n);
        }
      }
      throw new IllegalArgumentException(
          "segmentstore-jvm: unknown option '" + e.getKey() + "'; known options: "
              + String.join(", ", names));
    }
    return new ReadOptions(o);
  }

  static IllegalArgumentException refuse(String what) {
    return new IllegalArgumentException(
        "segmentstore-jvm does not support " + what
            + "; read with format('segmentstore') (the Python source) instead");
  }

  private static String require(Map<String, String> o, String name) {
    String v = o.get(name);
    if (v == null || v.trim().isEmpty()) {
      throw new IllegalArgumentException("segmentstore-jvm: option '" + name + "' is required");
    }
    return v;
  }

  private static long optNumber(Map<String, String> o, String key, long dflt, long lo, long hi) {
    String v = o.get(key);
    return v == null ? dflt : number(KNOWN.getOrDefault(key, key), v, lo, hi);
  }

  /** Option {@code name}'s integer value {@code v} in lo..hi (the writer's options too). */
  static long number(String name, String v, long lo, long hi) {
    long n;
    try {
      n = Long.parseLong(v.trim().replace("_", ""));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(
          "segmentstore-jvm: option '" + name + "' must be an integer, not '" + v + "'");
    }
    if (n < lo || n > hi) {
      throw new IllegalArgumentException(
          "segmentstore-jvm: option '" + name + "' must be in " + lo + ".." + hi + ", not " + n);
    }
    return n;
  }

  private static double seconds(Map<String, String> o, String key, double dflt) {
    String v = o.get(key);
    if (v == null) {
      return dflt;
    }
    double d;
    try {
      d = Double.parseDouble(v.trim());
    } catch (NumberFormatException e) {
      d = Double.NaN;
    }
    if (!(d > 0 && d <= 86_400)) {
      throw new IllegalArgumentException(
          "segmentstore-jvm: option '" + KNOWN.getOrDefault(key, key)
              + "' must be seconds in (0, 86400], not '" + v + "'");
    }
    return d;
  }

  String endpoint() {
    return host + ":" + port;
  }
}
