package twophase.kafka;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The hand-off from a finished staged write's job commit (on the driver's JVM) to the sink's
 * Python driver, which takes it through py4j right after the write returns: the open transactions
 * as one JSON array, by the write's id. Nothing here is durable: the sink persists the
 * transactions in its checkpoint before any is committed, and a driver that dies first leaves them
 * to the lingering cleanup.
 */
public final class StagedWrites {
  private static final Map<String, String> WRITES = new ConcurrentHashMap<>();
  private static final ObjectMapper JSON = new ObjectMapper();

  private StagedWrites() {}

  static void put(String writeId, List<StagedTransaction> open) {
    List<Map<String, Object>> rows = new ArrayList<>(open.size());
    for (StagedTransaction t : open) {
      rows.add(t.toMap());
    }
    try {
      WRITES.put(writeId, JSON.writeValueAsString(rows));
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot encode the staged write's transactions", e);
    }
  }

  /**
   * The open transactions of write {@code writeId} as a JSON array, removed from here; {@code null}
   * when no job commit handed any over under that id (the write failed, or was taken already).
   */
  public static String take(String writeId) {
    return WRITES.remove(writeId);
  }
}
