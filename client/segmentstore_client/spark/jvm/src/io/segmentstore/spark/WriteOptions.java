// Options of the segmentstore-jvm writer, parsed and checked once on the driver (a typo or
// an option only the Python sink supports fails the write before any task starts). Names,
// aliases and defaults are the Python sink's (option_table.py) where they apply; keys may
// arrive in any case and in snake_case. Immutable and Serializable (it travels to tasks).
package io.segmentstore.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

final class WriteOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  static final int DEFAULT_ROWS_PER_EVENT = 10_000;
  static final int MAX_ROWS_PER_EVENT = 1 << 20;
  static final int DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024;
  /** options.py LIMIT_EVENT_BYTES: the most one event may hold (the wire's 8 MiB less room). */
  static final int LIMIT_EVENT_BYTES = 8 * 1024 * 1024 - 64 * 1024;

  /** Options this writer honours (flattened lowercase key -> documented name). */
  private static final Map<String, String> KNOWN = new TreeMap<>();

  /** Other names of options (flattened), as the Python sink accepts them. */
  private static final Map<String, String> ALIASES =
      Map.of("txnappid", "writeid", "txnversion", "writeversion");

  /** Options of the Python sink this writer does not implement, with the reason. */
  private static final Map<String, String> PYTHON_ONLY = new TreeMap<>();

  static {
    for (String n :
        new String[] {
          "endpoint", "segment", "path", "segments", "timeout", "connectTimeout",
          "rowsPerEvent", "maxEventBytes", "compression", "create", "saveMode", "encoding",
          "writeId", "writeVersion"
        }) {
      KNOWN.put(n.toLowerCase(Locale.ROOT), n);
    }
    String[][] python = {
      {"atomic", "atomic writes (option 'atomic')"},
      {"stream", "stream writes (option 'stream')"},
      {"controller", "stream writes (option 'controller')"},
      {"routingKeyColumn", "stream writes (option 'routingKeyColumn')"},
      {"credentials", "authentication (option 'credentials')"},
      {"tlsCaFile", "TLS (option 'tlsCaFile')"},
      {"tlsVerify", "TLS (option 'tlsVerify')"},
      {"tlsCertFile", "TLS (option 'tlsCertFile')"},
      {"tlsKeyFile", "TLS (option 'tlsKeyFile')"},
      {"recordFormat", "record formats (option 'recordFormat')"},
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
  final int rowsPerEvent;
  final int maxEventBytes;
  final String compression; // none, lz4, zstd
  final boolean create;
  final String saveMode; // append, error, ignore
  final String writeId; // null: a random identity per write
  final Long writeVersion; // null: none

  private WriteOptions(Map<String, String> o) {
    // The endpoint, segments and timeouts are the reader's rules: parse them the same way.
    Map<String, String> read = new TreeMap<>();
    for (String k : new String[] {"endpoint", "segment", "path", "segments", "timeout"}) {
      if (o.containsKey(k)) {
        read.put(k, o.get(k));
      }
    }
    if (o.containsKey("connecttimeout")) {
      read.put("connecttimeout", o.get("connecttimeout"));
    }
    ReadOptions r = parseTarget(read);
    this.host = r.host;
    this.port = r.port;
    this.segments = Collections.unmodifiableList(new ArrayList<>(r.segments));
    this.timeoutMillis = r.timeoutMillis;
    this.connectTimeoutMillis = Math.min(r.timeoutMillis, r.connectTimeoutMillis);
    this.rowsPerEvent =
        (int) number(o, "rowsperevent", DEFAULT_ROWS_PER_EVENT, 1, MAX_ROWS_PER_EVENT);
    this.maxEventBytes =
        (int) number(o, "maxeventbytes", DEFAULT_MAX_EVENT_BYTES, 1024, LIMIT_EVENT_BYTES);
    String encoding = choice(o, "encoding", "arrow", "arrow", "msgpack");
    if (!encoding.equals("arrow")) {
      throw refuse("encoding=" + encoding + " (it writes Arrow rows only)");
    }
    this.compression = choice(o, "compression", "zstd", "none", "lz4", "zstd");
    this.create = bool(o, "create", true);
    this.saveMode = choice(o, "savemode", "append", "append", "errorifexists", "error", "ignore")
        .replace("errorifexists", "error");
    String id = o.get("writeid");
    if (id != null && id.trim().isEmpty()) {
      throw new IllegalArgumentException("segmentstore-jvm: option 'writeId' must not be empty");
    }
    this.writeId = id == null ? null : id.trim();
    this.writeVersion =
        o.containsKey("writeversion") ? number(o, "writeversion", 0, 0, Long.MAX_VALUE) : null;
    if (writeVersion != null && writeId == null) {
      throw new IllegalArgumentException(
          "segmentstore-jvm: option 'writeVersion' needs 'writeId' (the application id)");
    }
  }

  private static ReadOptions parseTarget(Map<String, String> read) {
    try {
      return ReadOptions.parse(read);
    } catch (IllegalArgumentException e) {
      // The reader's wording says "read with"; a write gets the same fact for writes.
      throw new IllegalArgumentException(
          e.getMessage().replace("read with format", "write with format"), e);
    }
  }

  /** Parses Spark's options; IllegalArgumentException names the bad one. */
  static WriteOptions parse(Map<String, String> raw) {
    Map<String, String> o = new TreeMap<>();
    for (Map.Entry<String, String> e : raw.entrySet()) {
      String key = e.getKey().toLowerCase(Locale.ROOT).replace("_", "");
      String why = PYTHON_ONLY.get(key);
      if (why != null) {
        if (key.equals("atomic") && e.getValue().trim().equalsIgnoreCase("false")) {
          continue; // the default, said out loud
        }
        throw refuse(why);
      }
      key = ALIASES.getOrDefault(key, key);
      if (o.containsKey(key)) {
        throw new IllegalArgumentException(
            "segmentstore-jvm: option '" + KNOWN.get(key) + "' is given twice (as '"
                + e.getKey() + "' too)");
      }
      if (!KNOWN.containsKey(key)) {
        throw new IllegalArgumentException(
            "segmentstore-jvm: option '" + e.getKey() + "' is unknown for a write; known "
                + "options: " + String.join(", ", new TreeSet<>(KNOWN.values())));
      }
      o.put(key, e.getValue());
    }
    return new WriteOptions(o);
  }

  static IllegalArgumentException refuse(String what) {
    return new IllegalArgumentException(
        "segmentstore-jvm does not support " + what
            + "; write with format('segmentstore') (the Python sink) instead");
  }

  /** The target segment of a partition, as the Python sink picks it. */
  String targetOf(int partition) {
    return segments.get(partition % segments.size());
  }

  String endpoint() {
    return host + ":" + port;
  }

  private static long number(Map<String, String> o, String key, long dflt, long lo, long hi) {
    String v = o.get(key);
    return v == null ? dflt : ReadOptions.number(KNOWN.get(key), v, lo, hi);
  }

  private static String choice(Map<String, String> o, String key, String dflt, String... allowed) {
    String v = o.get(key);
    if (v == null) {
      return dflt;
    }
    String lower = v.trim().toLowerCase(Locale.ROOT);
    for (String a : allowed) {
      if (a.equals(lower)) {
        return a;
      }
    }
    throw new IllegalArgumentException(
        "segmentstore-jvm: option '" + KNOWN.get(key) + "' must be one of "
            + String.join(", ", allowed) + ", not '" + v + "'");
  }

  private static boolean bool(Map<String, String> o, String key, boolean dflt) {
    String v = o.get(key);
    if (v == null) {
      return dflt;
    }
    String lower = v.trim().toLowerCase(Locale.ROOT);
    if (lower.equals("true") || lower.equals("false")) {
      return lower.equals("true");
    }
    throw new IllegalArgumentException(
        "segmentstore-jvm: option '" + KNOWN.get(key) + "' must be true or false, not '" + v
            + "'");
  }
}
