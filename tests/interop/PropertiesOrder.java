// The iteration order of java.util.Properties, with the JDK's own class: each line of
// stdin is one Properties filled with its space-separated keys in order; the keys
// come out on one line in entrySet() order (Configuration.getClientConfigsInternal's
// MixAll.properties2String walks it). Run by tests/test_config.py as
// `java PropertiesOrder.java < cases`.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Properties;

public class PropertiesOrder {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            Properties p = new Properties();
            if (!line.isEmpty()) {
                for (String k : line.split(" ")) {
                    p.put(k, "v");
                }
            }
            StringBuilder keys = new StringBuilder();
            for (Map.Entry<Object, Object> e : p.entrySet()) {
                if (keys.length() > 0) {
                    keys.append(' ');
                }
                keys.append(e.getKey());
            }
            out.append(keys).append('\n');
        }
        System.out.print(out);
    }
}
