// Error replies of the wire protocol (wire-protocol.md section 6.7) as one IOException
// each, naming the segment and what to do. A reply type this reader does not expect is a
// protocol error. The layouts read here are the error replies' leading fields only.
package io.segmentstore.spark;

import java.io.DataInputStream;
import java.io.IOException;

final class ReplyErrors {
  private ReplyErrors() {}

  static IOException of(int type, DataInputStream r, String segment, long offset, String ep)
      throws IOException {
    String prefix = "segmentstore-jvm: segment '" + segment + "': ";
    switch (type) {
      case 50:
        return new IOException(prefix + ep + " does not own this segment (WrongHost)");
      case 51:
        return new IOException(prefix + "is sealed and has no data at offset " + offset);
      case 53:
        return new IOException(prefix + "does not exist (NoSuchSegment)");
      case 56:
        {
          r.readLong();
          r.readUTF();
          long start = r.readLong();
          return new IOException(
              prefix + "is truncated at " + start + "; offset " + offset
                  + " is no longer readable (SegmentIsTruncated)");
        }
      case 57:
        {
          r.readLong();
          return new IOException(prefix + ep + " does not support " + r.readUTF());
        }
      case 60:
        return new IOException(
            prefix + ep + " requires authentication (AuthTokenCheckFailed); the JVM reader "
                + "sends no token: read with format('segmentstore') and 'credentials'");
      case 61:
        {
          r.readLong();
          r.readUTF();
          return new IOException(prefix + "the server refused the request: " + r.readUTF());
        }
      default:
        return new IOException(
            "segmentstore-jvm: " + ep + " sent an unexpected reply of type " + type
                + " (segment '" + segment + "')");
    }
  }
}
