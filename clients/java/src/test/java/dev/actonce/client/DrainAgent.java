package dev.actonce.client;

import com.google.gson.Gson;
import java.time.Duration;
import java.util.Map;

/**
 * A load agent for the drain test (clients/crosslang): it runs runs back to back, three creates
 * each, one JSON line per acknowledged write on stdout, until a call fails; then it prints that
 * failure as the client classified it, and exits 0.
 *
 * <pre>java -cp ... dev.actonce.client.DrainAgent TARGET NAME</pre>
 */
public final class DrainAgent {
  private DrainAgent() {}

  public static void main(String[] args) {
    if (args.length != 2) {
      throw new IllegalArgumentException("usage: DrainAgent TARGET NAME");
    }
    String name = args[1];
    Gson gson = new Gson();
    try (ActonceClient client = ActonceClient.connect(args[0], Duration.ofSeconds(30))) {
      for (int run = 0; ; run++) {
        Attempt attempt = client.begin(Run.of(name + "-" + run, "drain", "c"));
        for (int n = 0; n < 3; n++) {
          String data = gson.toJson(Map.of("agent", name, "run", run, "n", n));
          Write written = attempt.create("ticket", data);
          System.out.println(gson.toJson(Map.of("id", written.id())));
          System.out.flush();
        }
        attempt.end();
      }
    } catch (ActonceException e) {
      System.out.println(
          gson.toJson(
              Map.of(
                  "code", e.code().name(),
                  "reason", e.reason(),
                  "failure_class", e.failureClass().name(),
                  "message", String.valueOf(e.getMessage()))));
      System.out.flush();
    }
  }
}
