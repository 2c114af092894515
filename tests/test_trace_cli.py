"""rmq trace analyze before Spark starts: a missing JDK or input is one line on
stderr and exit status 2, in about the time Python takes to start; the settings a
session starts with; rmq's own progress lines. No JVM is started here."""

import io
import os
import stat
import subprocess
import sys
import time

import pytest


import rmq
from rmq import cli
from rmq.trace import analyze

# The command's checks and settings do not depend on which core is selected.
pytestmark = pytest.mark.once

SRC = os.path.dirname(os.path.dirname(rmq.__file__))


def run_cli(args, env):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "rmq", "trace", "analyze", *args],
                       env=env, capture_output=True, text=True, timeout=120)
    return p, time.monotonic() - t0


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAVA_HOME", "PYSPARK_GATEWAY_PORT", "SPARK_REMOTE")}
    env["PYTHONPATH"] = SRC
    env.update(extra)
    return env


@pytest.fixture
def trace_dir(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "x-000000.rmqtrace").write_bytes(b"")
    return d


def fake_java(tmp_path, script):
    bin_dir = tmp_path / "jdk" / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text("#!/bin/sh\n" + script)
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return bin_dir


# ---------------------------------------------------------------- no JDK

@pytest.mark.requires("pyspark")
def test_no_jdk_is_one_line_and_exit_2_before_spark(tmp_path, trace_dir):
    empty = tmp_path / "bin"
    empty.mkdir()
    p, took = run_cli([str(trace_dir), "--out", str(tmp_path / "out")],
                      clean_env(PATH=str(empty)))
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("rmq trace analyze: ")
    assert "JDK" in p.stderr and "JAVA_HOME" in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    assert took < 10                    # a JVM start alone takes longer
    assert not (tmp_path / "out").exists()


def test_java_home_without_java(tmp_path):
    problem = analyze.java_problem({"JAVA_HOME": str(tmp_path), "PATH": os.defpath})
    assert "JAVA_HOME" in problem and "bin/java" in problem


def test_java_home_wins_over_path_as_in_spark_launcher(tmp_path):
    good = fake_java(tmp_path, 'echo \'openjdk version "21.0.2" 2024-01-16\' >&2\n')
    assert analyze.java_problem({"PATH": str(good)}) is None
    assert "JAVA_HOME" in analyze.java_problem({"PATH": str(good),
                                                "JAVA_HOME": str(tmp_path / "nothing")})


def test_a_java_that_does_not_run(tmp_path):
    bin_dir = fake_java(tmp_path, "echo 'Error: could not open jvm.cfg' >&2\nexit 1\n")
    problem = analyze.java_problem({"PATH": str(bin_dir)})
    assert "-version failed" in problem and "jvm.cfg" in problem


def test_a_java_too_old_for_this_spark(tmp_path, monkeypatch):
    bin_dir = fake_java(tmp_path, 'echo \'java version "1.8.0_381"\' >&2\n')
    monkeypatch.setattr(analyze, "_spark_version", lambda: "4.0.0")
    problem = analyze.java_problem({"PATH": str(bin_dir)})
    assert "Java 8" in problem and "17 or later" in problem
    monkeypatch.setattr(analyze, "_spark_version", lambda: "3.5.1")
    assert analyze.java_problem({"PATH": str(bin_dir)}) is None


@pytest.mark.requires("pyspark")
def test_the_cli_says_a_broken_java_in_one_line(tmp_path, trace_dir):
    bin_dir = fake_java(tmp_path, "exit 3\n")
    p, took = run_cli([str(trace_dir), "--out", str(tmp_path / "out")],
                      clean_env(PATH=str(bin_dir)))
    assert (p.returncode, p.stderr.count("\n")) == (2, 1), p.stderr
    assert "-version failed" in p.stderr and took < 10


# ---------------------------------------------------------------- inputs

@pytest.mark.parametrize("spell", [str, lambda p: "file:" + str(p), lambda p: "file://" + str(p)])
def test_a_missing_input_is_exit_2_at_once(tmp_path, trace_dir, spell):
    missing = spell(tmp_path / "nope")
    # found before Java is looked for: no JDK needed to be told
    p, took = run_cli([str(trace_dir), missing, "--out", str(tmp_path / "out")],
                      clean_env(PATH=str(tmp_path)))
    assert p.returncode == 2, p.stderr
    assert p.stderr == f"rmq trace analyze: {missing}: no such file or directory\n"
    assert took < 10


def test_check_inputs(tmp_path, trace_dir):
    analyze.check_inputs([str(trace_dir), "hdfs://nn/traces", "file:" + str(tmp_path / "*.pcap")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(analyze.Unusable, match="no trace segments"):
        analyze.check_inputs([str(tmp_path / "empty")])
    # a URI may hold the traces: Spark lists it
    analyze.check_inputs([str(tmp_path / "empty"), "s3a://bucket/traces/"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_input(tmp_path, trace_dir):
    f = trace_dir / "x-000000.rmqtrace"
    f.chmod(0)
    with pytest.raises(analyze.Unusable, match="cannot read"):
        analyze.check_inputs([str(f)])


def test_no_inputs_in_a_directory_before_spark(tmp_path):
    (tmp_path / "empty").mkdir()
    p, took = run_cli([str(tmp_path / "empty"), "--out", str(tmp_path / "out")],
                      clean_env(PATH=str(tmp_path)))
    assert (p.returncode, p.stderr.count("\n")) == (2, 1), p.stderr
    assert "no trace segments" in p.stderr


# ---------------------------------------------------------------- the session's settings

def test_a_local_run_has_no_ui_and_listens_on_loopback_only():
    for master in ("local[*]", "local[2]", "local"):
        conf = analyze.spark_conf(master, log4j_file="/tmp/q.properties")
        assert conf["spark.master"] == master
        assert conf["spark.ui.enabled"] == "false"
        assert conf["spark.ui.showConsoleProgress"] == "false"
        assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
        assert conf["spark.driver.extraJavaOptions"] == \
            "-Dlog4j2.configurationFile=file:/tmp/q.properties"


def test_ui_and_verbose_give_spark_back_its_defaults():
    conf = analyze.spark_conf("local[2]", ui=True, verbose=True, log4j_file="/tmp/q.properties")
    for key in ("spark.ui.enabled", "spark.ui.showConsoleProgress",
                "spark.driver.extraJavaOptions"):
        assert key not in conf
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"


def test_a_cluster_master_binds_where_spark_says():
    conf = analyze.spark_conf("spark://head:7077")
    assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf
    assert conf["spark.ui.enabled"] == "false"


def test_the_quiet_log4j_configuration_logs_errors_only():
    lines = dict(line.split(" = ", 1) for line in analyze._QUIET_LOG4J.splitlines())
    assert lines["rootLogger.level"] == "error"
    # the logger Spark's "Setting default log level" notice compares with the root's
    assert (lines["logger.spark.name"], lines["logger.spark.level"]) == ("org.apache.spark", "error")


def test_the_flags_parse():
    args = cli.build_parser().parse_args(
        ["trace", "analyze", "x", "--out", "o", "--verbose", "--ui", "--progress"])
    assert (args.verbose, args.ui, args.progress) == (True, True, True)
    args = cli.build_parser().parse_args(["trace", "analyze", "x", "--out", "o"])
    assert (args.verbose, args.ui, args.progress) == (False, False, False)


# ---------------------------------------------------------------- progress

class Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_quiet_off_a_terminal_unless_asked():
    out = io.StringIO()
    with analyze.Progress(stream=out).phase("decoding", done=lambda: "3 files"):
        pass
    assert out.getvalue() == ""
    with analyze.Progress(enabled=True, stream=out).phase("decoding", done=lambda: "3 files"):
        pass
    lines = out.getvalue().splitlines()
    assert lines[0] == "decoding..." and lines[1].startswith("decoding: 3 files, done in ")
    assert "\r" not in out.getvalue()


def test_progress_on_a_terminal_rewrites_one_line():
    out = Tty()
    n = iter(range(100))
    with analyze.Progress(stream=out).phase("decoding", status=lambda: f"{next(n)}/9 files"):
        time.sleep(0.7)
    text = out.getvalue()
    assert text.startswith("\r\x1b[Kdecoding... 0/9 files, 0 s")
    assert "\r\x1b[Kdecoding... 1/9 files" in text
    assert text.endswith("\n") and text.count("\n") == 1
    assert text.rsplit("\r\x1b[K", 1)[1].startswith("decoding: done in ")


def test_a_failed_phase_says_so():
    out = io.StringIO()
    with pytest.raises(RuntimeError):
        with analyze.Progress(enabled=True, stream=out).phase("decoding", done=lambda: "x"):
            raise RuntimeError
    assert out.getvalue().splitlines()[-1].startswith("decoding: failed in ")
