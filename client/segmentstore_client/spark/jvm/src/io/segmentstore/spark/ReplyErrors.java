// Error replies of the wire protocol (wire-protocol.md section 6.7) as one IOException
// each, naming the segment (and the offset, where a read asked for one) and what to do.
// Every error reply leads with the request id (InvalidEventNumber: after the writer id),
// which must be the waiting request's; a reply type this client does not expect is a
// protocol error. Only the leading fields are read; a body too short for them throws
// EOFException, which the caller reports as a malformed reply.
package io.segmentstore.spark;

import java.io.DataInputStream;
import java.io.IOException;

final class ReplyErrors {
  private ReplyErrors() {}

  static IOException of(
      int type, DataInputStream r, long id, String segment, long offset, String ep)
      throws IOException {
    String prefix = "segmentstore-jvm: " + WireClient.where(segment, offset) + ": ";
    String name = name(type);
    if (name == null) {
      return new IOException(
          "segmentstore-jvm: " + ep + " sent an unexpected reply of type " + type + " ("
              + WireClient.where(segment, offset) + ")");
    }
    if (type == 55) { // InvalidEventNumber: writer id, then the request id
      r.readLong();
      r.readLong();
    }
    long got = r.readLong();
    if (got != id) {
      return new IOException(
          "segmentstore-jvm: " + ep + " sent a " + name + " reply for request " + got
              + " while request " + id + " was waiting (" + WireClient.where(segment, offset)
              + ")");
    }
    switch (type) {
      case 50:
        return new IOException(prefix + ep + " does not own this segment (WrongHost)");
      case 51:
        return new IOException(prefix + (offset >= 0 ? "the segment is sealed and has no data there"
            : "the segment is sealed and takes no more writes (SegmentIsSealed)"));
      case 53:
        return new IOException(prefix + "the segment does not exist (NoSuchSegment)");
      case 56:
        {
          r.readUTF();
          long start = r.readLong();
          return new IOException(
              prefix + "the segment is truncated at " + start + "; data before it is no longer"
                  + " readable (SegmentIsTruncated)");
        }
      case 55:
        return new IOException(
            prefix + ep + " refused an event number (InvalidEventNumber): another writer with "
                + "this writer id is writing, or the connection lost its append session");
      case 57:
        return new IOException(prefix + ep + " does not support " + r.readUTF());
      case 60:
        return new IOException(
            prefix + ep + " requires authentication (AuthTokenCheckFailed); segmentstore-jvm "
                + "sends no token: use format('segmentstore') and 'credentials'");
      default: // 61
        r.readUTF();
        return new IOException(prefix + "the server refused the request: " + r.readUTF());
    }
  }

  private static String name(int type) {
    switch (type) {
      case 50:
        return "WrongHost";
      case 51:
        return "SegmentIsSealed";
      case 53:
        return "NoSuchSegment";
      case 55:
        return "InvalidEventNumber";
      case 56:
        return "SegmentIsTruncated";
      case 57:
        return "OperationUnsupported";
      case 60:
        return "AuthTokenCheckFailed";
      case 61:
        return "ErrorMessage";
      default:
        return null;
    }
  }

  /** A segment that ends before the range planned from its length (it cannot shrink). */
  static IOException shrank(String segment, long at, long plannedEnd) {
    return new IOException(
        "segmentstore-jvm: segment '" + segment + "' ends at offset " + at + ", before the end"
            + " of the range planned from its length (" + plannedEnd + "): the server lost data"
            + " or the segment was replaced while the query ran");
  }
}
