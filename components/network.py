"""The VPC the platform lives in."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.identity import source_trust_policy


@dataclass(frozen=True, kw_only=True)
class NetworkArgs:
    cluster_name: str
    region: str
    cidr: str
    availability_zones: Sequence[str]
    nat_per_zone: bool
    interface_endpoints: bool
    log_retention_days: int
    log_key_arn: pulumi.Input[str]
    log_key_ready: Sequence[pulumi.Resource]  # the log key, created with the policy that lets CloudWatch Logs use it
    tags: Mapping[str, str]
    public_load_balancers: bool = False  # higgsfield:publicLoadBalancers
    account_id: str | None = None  # the stack's account (higgsfield:delivery.accountId); else read off the log key


def subnet_plan(cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """Split the VPC: one large private block per AZ (pods take VPC IPs), small public ones.

    The VPC is cut in eighths; AZ i gets eighth i for nodes and pods, and the last eighth is
    cut again into public subnets for the NAT gateways and internet-facing load balancers.
    """
    eighths = list(ipaddress.IPv4Network(cidr).subnets(prefixlen_diff=3))
    if zones > len(eighths) - 1:
        raise ValueError(f"at most {len(eighths) - 1} availability zones fit in {cidr}")
    public = list(eighths[-1].subnets(prefixlen_diff=3))
    return [str(n) for n in eighths[:zones]], [str(n) for n in public[:zones]]


class Network(pulumi.ComponentResource):
    """A VPC across the configured AZs with private node subnets.

    Creates: VPC, per AZ a private subnet (tagged for internal load balancers and the cluster)
    and a public subnet (tagged for internet-facing load balancers, `kubernetes.io/role/elb`, only
    with publicLoadBalancers), an internet gateway, NAT gateway(s) (one, or one per AZ), route
    tables, an S3 gateway endpoint and, when asked, ECR/STS interface endpoints, and VPC flow
    logs (all traffic, accepted and rejected) into a KMS-encrypted CloudWatch log group with the
    stack's retention, written through a role only the flow-logs service can assume.
    Replaced when: the VPC CIDR or the AZ list changes (subnets are keyed by AZ).
    """

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:network:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": args.cluster_name},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": args.cluster_name}, opts=child
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={**tags, "Name": f"{args.cluster_name}-public"},
            opts=child,
        )

        private_cidrs, public_cidrs = subnet_plan(args.cidr, len(args.availability_zones))
        self.private_subnets: dict[str, aws.ec2.Subnet] = {}
        private_route_tables = []
        nat: aws.ec2.NatGateway | None = None

        def subnet(kind: str, zone: str, cidr: str, load_balancer_role: str | None) -> aws.ec2.Subnet:
            """Never hands out public IPs: NAT gateways and load balancers bring their own. The role
            tag is how the AWS Load Balancer Controller discovers subnets for a scheme, and what the
            in-tree provider prefers (TagNameSubnetPublicELB/TagNameSubnetInternalELB in
            kubernetes/cloud-provider-aws:pkg/providers/v1/aws.go@v1.36.1; TagKeySubnetPublicELB in
            kubernetes-sigs/aws-load-balancer-controller:pkg/networking/subnet_resolver.go@v3.5.0).
            Both still take an untagged public subnet for an internet-facing load balancer (the
            in-tree findELBSubnets: the tag only breaks ties; the controller: discovery by
            reachability when no subnet has the tag), so the team admission policy is what keeps
            teams' load balancers internal when the stack wants no public ones (components/tenancy.py)."""
            role = {f"kubernetes.io/role/{load_balancer_role}": "1"} if load_balancer_role else {}
            return aws.ec2.Subnet(
                f"{name}-{kind}-{zone}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                map_public_ip_on_launch=False,
                tags={**tags, **cluster_tag, "Name": f"{args.cluster_name}-{kind}-{zone}", **role},
                opts=child,
            )

        for zone, private_cidr, public_cidr in zip(args.availability_zones, private_cidrs, public_cidrs, strict=True):
            public = subnet("public", zone, public_cidr, "elb" if args.public_load_balancers else None)
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{zone}", subnet_id=public.id, route_table_id=public_rt.id, opts=child
            )
            if nat is None or args.nat_per_zone:
                eip = aws.ec2.Eip(
                    f"{name}-nat-{zone}",
                    domain="vpc",
                    tags={**tags, "Name": f"{args.cluster_name}-nat-{zone}"},
                    opts=child,
                )
                nat = aws.ec2.NatGateway(
                    f"{name}-nat-{zone}",
                    allocation_id=eip.id,
                    subnet_id=public.id,
                    tags={**tags, "Name": f"{args.cluster_name}-{zone}"},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                )
            private = subnet("private", zone, private_cidr, "internal-elb")
            route_table = aws.ec2.RouteTable(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                tags={**tags, "Name": f"{args.cluster_name}-private-{zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{zone}", subnet_id=private.id, route_table_id=route_table.id, opts=child
            )
            self.private_subnets[zone] = private
            private_route_tables.append(route_table)

        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_route_tables],
            tags={**tags, "Name": f"{args.cluster_name}-s3"},
            opts=child,
        )
        if args.interface_endpoints:
            endpoint_sg = aws.ec2.SecurityGroup(
                f"{name}-endpoints",
                vpc_id=vpc.id,
                description="HTTPS from inside the VPC to AWS interface endpoints",
                ingress=[
                    aws.ec2.SecurityGroupIngressArgs(
                        protocol="tcp", from_port=443, to_port=443, cidr_blocks=[args.cidr]
                    )
                ],
                tags={**tags, "Name": f"{args.cluster_name}-endpoints"},
                opts=child,
            )
            for service in ("ecr.api", "ecr.dkr", "sts"):
                aws.ec2.VpcEndpoint(
                    f"{name}-{service.replace('.', '-')}",
                    vpc_id=vpc.id,
                    service_name=f"com.amazonaws.{args.region}.{service}",
                    vpc_endpoint_type="Interface",
                    private_dns_enabled=True,
                    subnet_ids=[s.id for s in self.private_subnets.values()],
                    security_group_ids=[endpoint_sg.id],
                    tags={**tags, "Name": f"{args.cluster_name}-{service}"},
                    opts=child,
                )

        self._flow_logs(name, args, vpc, tags)
        self.vpc_id = vpc.id
        self.private_subnet_ids = [s.id for s in self.private_subnets.values()]
        self.register_outputs({"vpc_id": self.vpc_id, "private_subnet_ids": self.private_subnet_ids})

    def _flow_logs(self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc, tags: dict[str, str]) -> None:
        """Who talked to whom: every flow of the VPC, for incident response (and the policy pack)."""
        child = pulumi.ResourceOptions(parent=self)
        group_name = f"/aws/vpc/{args.cluster_name}/flow-logs"
        group = aws.cloudwatch.LogGroup(
            f"{name}-flow-logs",
            name=group_name,
            retention_in_days=args.log_retention_days,
            kms_key_id=args.log_key_arn,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.log_key_ready)),
        )

        # The flow-logs service assumes the role for flow logs of this account only: the source
        # account is the flow log's owner, the source ARN its flow log (a wildcard for the ID, which
        # is not known before the role: docs.aws.amazon.com/vpc/latest/userguide/flow-logs-iam-role.html).
        def trust(account: str) -> str:
            partition = (
                "aws-cn"
                if args.region.startswith("cn-")
                else "aws-us-gov"
                if args.region.startswith("us-gov-")
                else "aws"
            )
            source = f"arn:{partition}:ec2:{args.region}:{account}:vpc-flow-log/*"
            return source_trust_policy("vpc-flow-logs.amazonaws.com", account=account, source_arn=source)

        account = args.account_id or pulumi.Output.from_input(args.log_key_arn).apply(lambda key: key.split(":")[4])
        role = aws.iam.Role(
            f"{name}-flow-logs",
            assume_role_policy=pulumi.Output.from_input(account).apply(trust),
            tags=tags,
            opts=child,
        )
        # docs.aws.amazon.com/vpc/latest/userguide/flow-logs-iam-role.html, on this group only (by
        # name, so the policy is known at preview and the pack can read it).
        arn = f"arn:aws:logs:{args.region}:*:log-group:{group_name}"
        policy = aws.iam.RolePolicy(
            f"{name}-flow-logs",
            role=role.id,
            policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                            "Resource": [arn, f"{arn}:*"],
                        }
                    ],
                }
            ),
            opts=child,
        )
        aws.ec2.FlowLog(
            f"{name}-flow-logs",
            vpc_id=vpc.id,
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_destination=group.arn,
            iam_role_arn=role.arn,
            max_aggregation_interval=600,
            tags={**tags, "Name": f"{args.cluster_name}-flow-logs"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )
