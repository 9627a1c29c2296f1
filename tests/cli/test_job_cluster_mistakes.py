"""What a newcomer gets wrong on the way to the cluster (a kubeconfig that is not there, a context it
lacks, a resume of a job that is not paused) is one line that says what is wrong and what to do."""

from __future__ import annotations

from infra.cli.main import main
from tests.cli.test_job_client import _job, _patches, api, kubeconfig  # noqa: F401 (fixtures)


def test_a_kubeconfig_option_naming_no_file_says_so_and_writes_one_at_that_path(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    missing = tmp_path / "kubeconfig"
    assert main(["jobs", "status", "dev", "llama-ft", "-n", "ml", "--kubeconfig", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"error: no kubeconfig: {missing} (--kubeconfig) does not exist "
        f"(`aws eks update-kubeconfig --region us-west-2 --name higgsfield-dev --kubeconfig {missing}` writes one)\n"
    )


def test_no_kubeconfig_at_all_names_where_it_was_looked_for(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["jobs", "status", "dev", "llama-ft", "-n", "ml"]) == 2
    assert capsys.readouterr().err == (
        f"error: no kubeconfig: {tmp_path / '.kube' / 'config'} does not exist "
        "(`aws eks update-kubeconfig --region us-west-2 --name higgsfield-dev` writes one)\n"
    )


def test_a_context_the_kubeconfig_lacks_is_named_with_the_contexts_it_has(api, kubeconfig, capsys):  # noqa: F811
    assert main(["jobs", "status", "prod", "llama-ft", "-n", "llm", "--context", "prdo"]) == 2
    assert capsys.readouterr().err == f"error: --context prdo: {kubeconfig} has no such context (its contexts: prod)\n"
    assert api.requests == []


def test_resuming_a_job_still_waiting_in_its_queue_says_it_is_not_suspended_not_that_it_runs(
    api,  # noqa: F811
    kubeconfig,  # noqa: F811
    capsys,
):
    api.put(_job())
    assert main(["jobs", "resume", "prod", "llama-ft", "-n", "llm"]) == 0
    assert capsys.readouterr().out == "pytorchjob/llama-ft is not suspended: nothing to resume\n"
    assert _patches(api) == []


def test_a_job_not_found_under_a_team_the_stack_lacks_names_the_stacks_teams(api, kubeconfig, capsys):  # noqa: F811
    api.put(_job())
    assert main(["jobs", "status", "prod", "llama-ft", "-n", "lmm"]) == 2
    assert capsys.readouterr().err == (
        'error: 404 NotFound: pytorchjobs "llama-ft" not found; -n lmm: stack prod has no team lmm '
        "(higgsfield:scheduler.teams: foundation, llm, vision)\n"
    )


def test_the_goodput_of_a_team_the_stack_lacks_is_refused_naming_its_teams_not_zero_jobs(
    api,  # noqa: F811
    kubeconfig,  # noqa: F811
    capsys,
):
    assert main(["jobs", "status", "prod", "-n", "lmm"]) == 2
    assert capsys.readouterr().err == (
        "error: -n lmm: stack prod has no team lmm (higgsfield:scheduler.teams: foundation, llm, vision)\n"
    )
    assert api.requests == []
