package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The README's example is the one developers copy: it must compile and run. */
class ReadmeExampleTest {
  @Test
  void theReadmeExampleRuns(@TempDir Path dir) throws Exception {
    String readme = Files.readString(Path.of("README.md"));
    Matcher block =
        Pattern.compile("```java\n(import dev\\.actonce[\\s\\S]*?public class Example[\\s\\S]*?)```")
            .matcher(readme);
    assertTrue(block.find(), "README.md has no runnable example");
    try (Sidecar sidecar = Sidecar.start()) {
      Files.writeString(
          dir.resolve("Example.java"), block.group(1).replace("127.0.0.1:50051", sidecar.target));
      JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
      int compiled =
          javac.run(
              null, null, null,
              "-classpath", System.getProperty("java.class.path"),
              "-d", dir.toString(),
              dir.resolve("Example.java").toString());
      assertEquals(0, compiled, "the example does not compile");

      ByteArrayOutputStream out = new ByteArrayOutputStream();
      PrintStream stdout = System.out;
      try (URLClassLoader loader =
          new URLClassLoader(new URL[] {dir.toUri().toURL()}, getClass().getClassLoader())) {
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        loader.loadClass("Example").getMethod("main", String[].class).invoke(null, (Object) new String[0]);
      } finally {
        System.setOut(stdout);
      }
      String printed = out.toString(StandardCharsets.UTF_8);
      assertTrue(
          printed.matches("art_[a-z2-7]{26} (ALREADY_)?APPLIED\\n"), "the example printed " + printed);
    }
  }
}
