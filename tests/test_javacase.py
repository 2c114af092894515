"""rmq.javacase against the JDK: the case folding String.equalsIgnoreCase compares
with, Character.isWhitespace (StringUtils.isBlank) and Boolean.parseBoolean."""

import subprocess
import sys
from pathlib import Path

import pytest

from rmq import javacase

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.once
@pytest.mark.requires("java")
def test_tables_are_the_jdks():
    """tools/javacase.py regenerates the tables with the JDK here and compares."""
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "javacase.py"), "--check"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.once
@pytest.mark.requires("java")
def test_comparisons_are_the_jdks(tmp_path):
    pairs = [("zone-a", "ZONE-A"), ("zone-a", "zone-b"), ("\u017f", "s"), ("\u017f", "S"),
             ("\u0130", "i"), ("\u0131", "I"), ("\u212a", "k"), ("stra\xdfe", "STRASSE"),
             ("\xdf", "\u1e9e"), ("\U00010400", "\U00010428"), ("a", "aa"), ("", ""),
             ("\u01c5", "\u01c4"), ("\u01c5", "\u01c6"), ("\u03c2", "\u03a3"),
             ("\u1f88", "\u1f80"), ("\u2c2f", "\u2c5f")]
    blanks = ["", " ", "\t\n\x0b\x0c\r", "\x1c\x1d\x1e\x1f", "\xa0", "\u2007", "\u202f",
              "\u2003", "\u3000", "\u200b", "\ufeff", " x "]
    booleans = ["true", "TRUE", "tRuE", "true ", "yes", "", "\u0130rue"]
    source = tmp_path / "Check.java"
    def lit(s):     # a Java String of these UTF-16 units (no \u escapes: javac reads
        units = s.encode("utf-16-be")       # them before it lexes the source)
        codes = [str(int.from_bytes(units[i:i + 2], "big")) for i in range(0, len(units), 2)]
        return f"new String(new char[]{{{', '.join(f'(char) {c}' for c in codes)}}})"

    lines = [f"System.out.println({lit(a)}.equalsIgnoreCase({lit(b)}));" for a, b in pairs]
    # StringUtils.isBlank, as commons-lang3 writes it
    lines += [f"{{ String s = {lit(b)}; boolean blank = true; for (int i = 0; i < s.length(); "
              f"i++) blank &= Character.isWhitespace(s.charAt(i)); "
              f"System.out.println(blank); }}" for b in blanks]
    lines += [f"System.out.println(Boolean.parseBoolean({lit(b)}));" for b in booleans]
    source.write_text("public class Check { public static void main(String[] a) {\n"
                      + "\n".join(lines) + "\n} }\n")
    out = subprocess.run(["java", str(source)], capture_output=True, text=True, check=True,
                         timeout=300).stdout.split()
    ours = ([javacase.equals_ignore_case(a, b) for a, b in pairs]
            + [javacase.is_blank(b) for b in blanks]
            + [javacase.parse_boolean(b) for b in booleans])
    assert [w == "true" for w in out] == ours


def test_fold_examples():
    assert javacase.fold("Zone-A") == "zone-a"
    assert javacase.equals_ignore_case("\u017f", "S")           # long s: upper is S
    assert javacase.equals_ignore_case("\u0130", "i")           # simple lower of I-dot is i
    assert not javacase.equals_ignore_case("stra\xdfe", "STRASSE")   # no full mappings
    assert javacase.equals_ignore_case(None, None) and not javacase.equals_ignore_case("a", None)
    assert javacase.is_blank(None) and javacase.is_blank(" \t") and not javacase.is_blank("\xa0")
    assert javacase.parse_boolean("TrUe") and not javacase.parse_boolean(None)
