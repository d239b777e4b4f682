"""REST endpoints of promotions: start one (202 + the promotion to poll), read them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Path, Query, Request
from fastapi.responses import JSONResponse

from control_plane.auth.dependencies import Reader, Writer
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.pagination import Limit, Offset, Page
from control_plane.promotions import service
from control_plane.promotions.driver import PromotionDriver
from control_plane.promotions.orm import PromotionState
from control_plane.promotions.schemas import PromotionCreate, PromotionOut
from control_plane.registry.schemas import MODEL_NAME_PATTERN, ModelName

router = APIRouter(tags=["promotions"], responses=error_responses(401, 403, 422, 503))
PromotionId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")]
AliasFilter = Annotated[str | None, Query(pattern=MODEL_NAME_PATTERN)]


def _driver(request: Request) -> PromotionDriver:
    driver: PromotionDriver = request.app.state.promotion_driver
    return driver


@router.post("/models/{name}/promotions", status_code=202, response_model=PromotionOut,
             responses=error_responses(404, 409))
def start_promotion(name: ModelName, body: PromotionCreate, request: Request,
                    session: DbSession, actor: Writer, background: BackgroundTasks
                    ) -> JSONResponse:
    """Promote a version (registered, or from a manifest) to an alias: candidate deployment,
    gates, zero-downtime swap, gates again, candidate removed; rolled back on any failure.
    Poll the promotion in the Location header. 409 names the promotion of this model that is
    still running (its Location too)."""
    promotion = service.start(session, actor, name, body)
    out = PromotionOut.of(promotion)
    # Runs after the transaction commits (the session dependency ends first).
    background.add_task(_driver(request).submit, promotion.id)
    return JSONResponse(out.model_dump(mode="json"), status_code=202,
                        headers={"Location": f"/api/v1/promotions/{promotion.id}"})


@router.get("/models/{name}/promotions", responses=error_responses(404))
def list_promotions(name: ModelName, session: DbSession, _: Reader,
                    state: PromotionState | None = None, alias: AliasFilter = None,
                    ci_run_url: Annotated[str | None, Query(max_length=2048)] = None,
                    limit: Limit = 50, offset: Offset = 0) -> Page[PromotionOut]:
    """The model's promotions, newest first, with their steps and gate results."""
    promotions, total = service.list_promotions(session, name, state, alias, ci_run_url,
                                                limit, offset)
    return Page(items=[PromotionOut.of(p) for p in promotions], total=total, limit=limit,
                offset=offset)


@router.get("/promotions/{promotion_id}", responses=error_responses(404))
def get_promotion(promotion_id: PromotionId, session: DbSession, _: Reader) -> PromotionOut:
    """One promotion; poll it until ``state`` is succeeded or failed."""
    return PromotionOut.of(service.get(session, promotion_id))
