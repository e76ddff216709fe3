"""cdk-nag acknowledgments in the form cdk-nag names its findings, shared by the constructs that need them."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct


def acknowledge_wildcards(scope: IConstruct, reasons: dict[str, str]) -> None:
    """One AwsSolutions-IAM5 acknowledgment per wildcard resource of the policies under ``scope``, with its reason."""
    for resource, reason in reasons.items():
        Validations.of(scope).acknowledge(
            Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_form(Stack.of(scope), resource)}]", reason=reason)
        )


def nag_form(stack: Stack, value: str) -> str:
    """`value` as cdk-nag prints it in finding ids: Ref -> <Name>, Fn::GetAtt -> <Name.Attr>, joins concatenated."""

    def render(v) -> str:
        if isinstance(v, str):
            return v
        if "Ref" in v:
            return f"<{v['Ref']}>"
        if "Fn::GetAtt" in v:
            return f"<{'.'.join(v['Fn::GetAtt'])}>"
        if "Fn::Join" in v:
            sep, parts = v["Fn::Join"]
            return sep.join(render(p) for p in parts)
        raise ValueError(f"no cdk-nag form for {v!r}")

    return render(stack.resolve(value))
