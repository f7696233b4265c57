// The identities of a deterministic write (options.py, commit.py), derived in the JVM
// exactly as the Python sink derives them, so a writeId written by one format is the same
// write to the other: the write identity uuid5("write|<writeId>[|v<version>]"), the
// commit marker attribute uuid5("commit|<scope>") raised to the write's sequence number
// on commit, and the fingerprint attributes uuid5("<rows|schema>|<scope>|<seq>") whose
// schema value is schema_hash: uuid5(NAMESPACE_OID, <schema JSON>) & (2^62 - 1), over
// the JSON Python's json.dumps(sort_keys=True, separators=(",", ":")) writes.
package io.segmentstore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.UUID;

final class WriteIds {
  static final UUID NAMESPACE_OID = UUID.fromString("6ba7b812-9dad-11d1-80b4-00c04fd430c8");

  private WriteIds() {}

  /** options.py write_identity for a given writeId (and version, or null). */
  static UUID identity(String writeId, Long version) {
    String name = "write|" + writeId + (version == null ? "" : "|v" + version);
    return Planner.uuid5(Planner.NAMESPACE, name);
  }

  /** options.py marker_of: the commit marker's scope. */
  static String markerScope(String writeId, Long version, UUID identity) {
    return version != null ? "app|" + writeId : "write|" + identity;
  }

  static UUID commitMarker(String scope) {
    return Planner.uuid5(Planner.NAMESPACE, "commit|" + scope);
  }

  /** options.py fence_attribute: set on the targets when a run is aborted. */
  static UUID fence(UUID run) {
    return Planner.uuid5(Planner.NAMESPACE, "fence|" + run);
  }

  static UUID fingerprint(String kind, String scope, long seq) {
    return Planner.uuid5(Planner.NAMESPACE, kind + "|" + scope + "|" + seq);
  }

  /** commit.py schema_hash of a Spark schema JSON (any key order: it is canonicalized). */
  static long schemaHash(String sparkJson) {
    return Planner.uuid5(NAMESPACE_OID, pythonJson(sparkJson)).getLeastSignificantBits()
        & ((1L << 62) - 1);
  }

  /** {@code json} as Python's json.dumps(..., separators=(",", ":"), sort_keys=True). */
  static String pythonJson(String json) {
    try {
      StringBuilder b = new StringBuilder(json.length());
      write(new ObjectMapper().readTree(json), b);
      return b.toString();
    } catch (IOException e) {
      throw new IllegalArgumentException("not JSON: " + e.getMessage(), e);
    }
  }

  private static void write(JsonNode n, StringBuilder b) {
    if (n.isObject()) {
      List<String> keys = new ArrayList<>();
      for (Iterator<String> it = n.fieldNames(); it.hasNext(); ) {
        keys.add(it.next());
      }
      Collections.sort(keys); // Python sorts by code point; UTF-16 order agrees below U+D800
      b.append('{');
      for (int i = 0; i < keys.size(); i++) {
        b.append(i > 0 ? "," : "");
        string(keys.get(i), b);
        b.append(':');
        write(n.get(keys.get(i)), b);
      }
      b.append('}');
    } else if (n.isArray()) {
      b.append('[');
      for (int i = 0; i < n.size(); i++) {
        b.append(i > 0 ? "," : "");
        write(n.get(i), b);
      }
      b.append(']');
    } else if (n.isTextual()) {
      string(n.textValue(), b);
    } else {
      b.append(n.toString()); // numbers, booleans, null
    }
  }

  /** A JSON string as Python writes it with ensure_ascii: \\uXXXX in lowercase hex. */
  private static void string(String s, StringBuilder b) {
    b.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"': b.append("\\\""); break;
        case '\\': b.append("\\\\"); break;
        case '\n': b.append("\\n"); break;
        case '\r': b.append("\\r"); break;
        case '\t': b.append("\\t"); break;
        case '\b': b.append("\\b"); break;
        case '\f': b.append("\\f"); break;
        default:
          if (c < 0x20 || c > 0x7e) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
      }
    }
    b.append('"');
  }
}
