// The iteration order of the JDK's own hash tables, for the oracles of rmq.javaorder
// (tests/test_javaorder.py). Run as `java JavaOrder.java < script`, one command a
// line, keys as hex of their UTF-8 bytes; prints one line per query:
//   new chm N|-      a ConcurrentHashMap<String, Integer>(N), or ()
//   new hm N|-       a HashMap<String, Integer>(N), or ()
//   put KEY          remove KEY
//   order            the keys in iteration order (hex, space-separated)
//   table            the table's length (0 before the first insertion)
//   copy             the order of new HashSet<>(keySet()) of the map (pickupTopicRouteData)
//   cow              the keySet() added to a CopyOnWriteArraySet (5.0.0's TopicList)
// `table` reads a private field: run with --add-opens java.base/java.util=ALL-UNNAMED
// --add-opens java.base/java.util.concurrent=ALL-UNNAMED.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Array;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.StringJoiner;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArraySet;

public class JavaOrder {
    static String unhex(String h) {
        byte[] b = new byte[h.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        }
        return new String(b, StandardCharsets.UTF_8);
    }

    static String hex(String s) {
        StringBuilder sb = new StringBuilder();
        for (byte x : s.getBytes(StandardCharsets.UTF_8)) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }

    static String line(Collection<String> keys) {
        StringJoiner j = new StringJoiner(" ");
        for (String k : keys) {
            j.add(hex(k));
        }
        return j.toString();
    }

    static int tableLength(Map<String, Integer> m) throws Exception {
        Class<?> c = m instanceof ConcurrentHashMap ? ConcurrentHashMap.class : HashMap.class;
        Field f = c.getDeclaredField("table");
        f.setAccessible(true);
        Object t = f.get(m);
        return t == null ? 0 : Array.getLength(t);
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Map<String, Integer> m = new HashMap<>();
        StringBuilder out = new StringBuilder();
        String cmd;
        while ((cmd = in.readLine()) != null) {
            String[] w = cmd.trim().split(" ");
            switch (w[0]) {
                case "new":
                    boolean chm = w[1].equals("chm");
                    if (w[2].equals("-")) {
                        m = chm ? new ConcurrentHashMap<>() : new HashMap<>();
                    } else {
                        int n = Integer.parseInt(w[2]);
                        m = chm ? new ConcurrentHashMap<>(n) : new HashMap<>(n);
                    }
                    break;
                case "put":
                    m.put(unhex(w.length > 1 ? w[1] : ""), 1);
                    break;
                case "remove":
                    m.remove(unhex(w.length > 1 ? w[1] : ""));
                    break;
                case "order":
                    out.append(line(m.keySet())).append('\n');
                    break;
                case "table":
                    out.append(tableLength(m)).append('\n');
                    break;
                case "copy":
                    out.append(line(new HashSet<>(m.keySet()))).append('\n');
                    break;
                case "cow":
                    Set<String> cow = new CopyOnWriteArraySet<>();
                    cow.addAll(m.keySet());
                    out.append(line(cow)).append('\n');
                    break;
                case "":
                    break;
                default:
                    throw new IllegalArgumentException("unknown command: " + cmd);
            }
        }
        System.out.print(out);
    }
}
